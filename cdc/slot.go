package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrSlotNotFound means the replication slot does not exist.
var ErrSlotNotFound = errors.New("replication slot not found")

// ErrSlotActive means a process streams from the slot, so it cannot be
// dropped.
var ErrSlotActive = errors.New("replication slot is active")

// SlotStatus describes a replication slot as PostgreSQL reports it.
type SlotStatus struct {
	Slot              string `json:"slot"`
	Plugin            string `json:"plugin"`
	Database          string `json:"database"`
	Active            bool   `json:"active"`
	ActivePID         *int32 `json:"active_pid"`
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn"`
	RestartLSN        string `json:"restart_lsn"`
	CurrentWALLSN     string `json:"current_wal_lsn"`
	// LagBytes is current WAL minus confirmed_flush_lsn: WAL not yet
	// confirmed by the reader.
	LagBytes int64 `json:"lag_bytes"`
	// RetainedWALBytes is current WAL minus restart_lsn: WAL the server keeps
	// for the slot.
	RetainedWALBytes int64 `json:"retained_wal_bytes"`
	// WALStatus is pg_replication_slots.wal_status (reserved, extended,
	// unreserved, lost).
	WALStatus string `json:"wal_status"`
	// SafeWALSizeBytes is the WAL that can still be written before the slot
	// is invalidated by max_slot_wal_keep_size; nil when unlimited.
	SafeWALSizeBytes *int64 `json:"safe_wal_size_bytes"`
}

// ReadSlotStatus reads the status of slot over conn.
func ReadSlotStatus(ctx context.Context, conn *pgx.Conn, slot string) (SlotStatus, error) {
	var st SlotStatus
	err := conn.QueryRow(ctx, `SELECT slot_name, coalesce(plugin, ''), coalesce(database, ''), active, active_pid,
			coalesce(confirmed_flush_lsn::text, ''), coalesce(restart_lsn::text, ''), pg_current_wal_lsn()::text,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
			coalesce(wal_status, ''), safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(
		&st.Slot, &st.Plugin, &st.Database, &st.Active, &st.ActivePID,
		&st.ConfirmedFlushLSN, &st.RestartLSN, &st.CurrentWALLSN,
		&st.LagBytes, &st.RetainedWALBytes, &st.WALStatus, &st.SafeWALSizeBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotStatus{}, fmt.Errorf("%w: %s", ErrSlotNotFound, slot)
	}
	if err != nil {
		return SlotStatus{}, fmt.Errorf("reading slot %s: %w", slot, err)
	}
	return st, nil
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
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		if isPGCode(err, "55006") {
			return fmt.Errorf("%w: %s: %w", ErrSlotActive, slot, err)
		}
		return fmt.Errorf("dropping slot %s: %w", slot, err)
	}
	return nil
}
