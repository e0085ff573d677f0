package slot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/schema"
)

// ErrNotFound means the replication slot does not exist.
var ErrNotFound = schema.ErrSlotNotFound

// ErrActive means a process streams from the slot, so it cannot be dropped.
var ErrActive = errors.New("replication slot is active")

// Status describes a replication slot as PostgreSQL reports it.
type Status = schema.SlotStatus

// ReadStatus reads the status of slot over conn (schema.ReadSlotStatus).
func ReadStatus(ctx context.Context, conn *pgx.Conn, slot string) (Status, error) {
	return schema.ReadSlotStatus(ctx, conn, slot)
}

// Drop drops slot. It refuses an active slot (a relay streams from it) and
// a missing one. Dropping loses the slot's position: the next relay finds
// the gap against its checkpoint, recreates the slot and republishes the
// outbox rows from the checkpoint on (package gap).
func Drop(ctx context.Context, conn *pgx.Conn, slot string) error {
	st, err := ReadStatus(ctx, conn, slot)
	if err != nil {
		return err
	}
	if st.Active {
		pid := int32(0)
		if st.ActivePID != nil {
			pid = *st.ActivePID
		}
		return fmt.Errorf("%w: %s is streamed by pid %d; stop the reader first", ErrActive, slot, pid)
	}
	if err := schema.DropSlot(ctx, conn, slot); err != nil {
		if control.IsCode(err, "55006") {
			return fmt.Errorf("%w: %w", ErrActive, err)
		}
		return err
	}
	return nil
}
