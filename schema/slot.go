package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements about replication slots every component shares: the
// reader's checks and metrics, `eventforge slot`, verify, the console, the
// bench and the test harness read a slot with ReadSlotStatus and drop one
// with DropSlot or DropSlotsIfExist.

// ErrSlotNotFound means the replication slot does not exist.
var ErrSlotNotFound = errors.New("replication slot not found")

// Execer is the part of pgx.Conn / pgxpool.Pool that drops slots.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SlotStatus describes a replication slot as PostgreSQL reports it.
type SlotStatus struct {
	Slot string `json:"slot"`
	// Plugin is the output plugin; empty for a physical slot.
	Plugin string `json:"plugin"`
	// Database is the slot's database; empty for a physical slot.
	Database  string `json:"database"`
	Active    bool   `json:"active"`
	ActivePID *int32 `json:"active_pid"`
	// ConfirmedFlushLSN and RestartLSN are empty while PostgreSQL reports
	// NULL (a physical slot, or a logical slot still being created).
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

// ReadSlotStatus reads the status of slot on a primary, or on a standby
// (PostgreSQL 16+ decodes there), where the current WAL position is the
// replayed one. A missing slot is ErrSlotNotFound.
func ReadSlotStatus(ctx context.Context, q Querier, slot string) (SlotStatus, error) {
	var st SlotStatus
	err := q.QueryRow(ctx, `SELECT slot_name, coalesce(plugin, ''), coalesce(database, ''), active, active_pid,
			coalesce(confirmed_flush_lsn::text, ''), coalesce(restart_lsn::text, ''), w.lsn::text,
			coalesce(pg_wal_lsn_diff(w.lsn, confirmed_flush_lsn), 0)::bigint,
			coalesce(pg_wal_lsn_diff(w.lsn, restart_lsn), 0)::bigint,
			coalesce(wal_status, ''), safe_wal_size
		FROM pg_replication_slots,
			LATERAL (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn) w
		WHERE slot_name = $1`, slot).Scan(
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

// DropSlot drops slot. PostgreSQL refuses a missing slot (42704) and one a
// process streams from (55006); the error wraps its *pgconn.PgError.
func DropSlot(ctx context.Context, q Execer, slot string) error {
	if _, err := q.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		return fmt.Errorf("dropping slot %s: %w", slot, err)
	}
	return nil
}

// DropSlotsIfExist drops each of the named slots that exists and no process
// streams from.
func DropSlotsIfExist(ctx context.Context, q Execer, slots ...string) error {
	if _, err := q.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ANY($1)`, slots); err != nil {
		return fmt.Errorf("dropping slots %v: %w", slots, err)
	}
	return nil
}

// ErrNoStandbySlots means none of the named physical slots exists.
var ErrNoStandbySlots = errors.New("none of the standby slots exists on this server")

// StandbySlotsFlushed reads the oldest restart_lsn of the named physical
// slots: for a standby's slot, the position the standby flushed. It is ""
// while any of them has none yet (a standby that never connected has
// flushed nothing). None of them existing is ErrNoStandbySlots; only some
// of them existing as physical slots is an error.
func StandbySlotsFlushed(ctx context.Context, q Querier, slots []string) (string, error) {
	var (
		lsn   *string
		found int
	)
	err := q.QueryRow(ctx, `SELECT CASE WHEN count(restart_lsn) = count(*) THEN min(restart_lsn)::text END, count(*)
		FROM pg_replication_slots WHERE slot_name = ANY($1) AND slot_type = 'physical'`, slots).Scan(&lsn, &found)
	switch {
	case err != nil:
		return "", fmt.Errorf("reading the standby slots %v: %w", slots, err)
	case found == 0:
		return "", ErrNoStandbySlots
	case found != len(slots):
		return "", fmt.Errorf("of the standby slots %v only %d exist as physical slots on this server", slots, found)
	case lsn == nil:
		return "", nil
	}
	return *lsn, nil
}
