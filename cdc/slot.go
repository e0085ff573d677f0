package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/schema"
)

// ErrSlotNotFound means the replication slot does not exist.
var ErrSlotNotFound = schema.ErrSlotNotFound

// ErrSlotActive means a process streams from the slot, so it cannot be
// dropped.
var ErrSlotActive = errors.New("replication slot is active")

// SlotStatus describes a replication slot as PostgreSQL reports it.
type SlotStatus = schema.SlotStatus

// ReadSlotStatus reads the status of slot over conn (schema.ReadSlotStatus).
func ReadSlotStatus(ctx context.Context, conn *pgx.Conn, slot string) (SlotStatus, error) {
	return schema.ReadSlotStatus(ctx, conn, slot)
}

// DropSlot drops slot. It refuses an active slot (a reader streams from it)
// and a missing one. Dropping loses the slot's position: the next reader
// finds the gap against its checkpoint, recreates the slot and republishes
// the outbox rows from the checkpoint on (gap.go).
func DropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	st, err := ReadSlotStatus(ctx, conn, slot)
	if err != nil {
		return err
	}
	if st.Active {
		pid := int32(0)
		if st.ActivePID != nil {
			pid = *st.ActivePID
		}
		return fmt.Errorf("%w: %s is streamed by pid %d; stop the reader first", ErrSlotActive, slot, pid)
	}
	if err := schema.DropSlot(ctx, conn, slot); err != nil {
		if isPGCode(err, "55006") {
			return fmt.Errorf("%w: %w", ErrSlotActive, err)
		}
		return err
	}
	return nil
}

// errSlotBusy means another process's walsender still holds the slot.
var errSlotBusy = errors.New("replication slot is held by another process")

// errSlotMissing means the slot disappeared (dropped) after start.
var errSlotMissing = errors.New("replication slot does not exist")

// isPGCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func isPGCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// ptrLSN scans a text LSN into a pglogrepl.LSN.
type ptrLSN struct{ dst *pglogrepl.LSN }

func (p ptrLSN) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("lsn: unexpected %T", src)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return err
	}
	*p.dst = lsn
	return nil
}
