// Package slot reads, creates and drops the relay's logical replication
// slot. State is what the relay checks before it streams (gap recovery
// compares it with the checkpoint); Drop and ReadStatus serve the operator's
// `eventforge slot` commands.
package slot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/schema"
)

// ErrBusy means another process's walsender still holds the slot.
var ErrBusy = errors.New("replication slot is held by another process")

// ErrMissing means the slot disappeared (dropped) after it was checked.
var ErrMissing = errors.New("replication slot does not exist")

// State is what the relay reads about its slot before a session.
type State struct {
	Exists    bool
	Plugin    string
	Database  string
	Confirmed pglogrepl.LSN
	ActivePID *int32
	// WALStatus is pg_replication_slots.wal_status; "lost" means the WAL
	// the slot needs was removed.
	WALStatus string
	// Invalidation is why the server invalidated the slot
	// (invalidation_reason on 17+, "conflict" for conflicting on 16), or "".
	Invalidation string
	// Failover is the slot's failover property (17+; nil before).
	Failover *bool
}

// Read reads the slot on the control connection. Columns differ between
// server versions, so the row is read as JSON. A missing slot is a State
// that does not exist, not an error.
func Read(ctx context.Context, ctl *control.Conn, slot string) (State, error) {
	var raw []byte
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT to_jsonb(s) FROM pg_replication_slots s WHERE slot_name = $1`, slot).Scan(&raw)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("reading slot %s: %w", slot, err)
	}
	return parseRow(raw)
}

// parseRow decodes a pg_replication_slots row as JSON.
func parseRow(raw []byte) (State, error) {
	var row struct {
		Plugin             *string `json:"plugin"`
		Database           *string `json:"database"`
		ConfirmedFlushLSN  *string `json:"confirmed_flush_lsn"`
		ActivePID          *int32  `json:"active_pid"`
		WALStatus          *string `json:"wal_status"`
		Conflicting        *bool   `json:"conflicting"`
		InvalidationReason *string `json:"invalidation_reason"`
		Failover           *bool   `json:"failover"`
	}
	if err := json.Unmarshal(raw, &row); err != nil {
		return State{}, fmt.Errorf("decoding slot row: %w", err)
	}
	st := State{Exists: true, ActivePID: row.ActivePID, Failover: row.Failover}
	if row.Plugin != nil {
		st.Plugin = *row.Plugin
	}
	if row.Database != nil {
		st.Database = *row.Database
	}
	if row.WALStatus != nil {
		st.WALStatus = *row.WALStatus
	}
	switch {
	case row.InvalidationReason != nil:
		st.Invalidation = *row.InvalidationReason
	case row.Conflicting != nil && *row.Conflicting:
		st.Invalidation = "conflict"
	}
	if row.ConfirmedFlushLSN != nil {
		lsn, err := pglogrepl.ParseLSN(*row.ConfirmedFlushLSN)
		if err != nil {
			return State{}, fmt.Errorf("slot confirmed_flush_lsn %q: %w", *row.ConfirmedFlushLSN, err)
		}
		st.Confirmed = lsn
	}
	return st, nil
}

// CheckKind refuses, as a permanent error, a slot of another plugin or of
// another database than the control connection's. A missing slot passes.
func CheckKind(ctl *control.Conn, name string, st State) error {
	if !st.Exists {
		return nil
	}
	if st.Plugin != schema.OutputPlugin {
		return control.Permanentf("replication slot %q uses plugin %q, want %q", name, st.Plugin, schema.OutputPlugin)
	}
	if db := ctl.Database(); st.Database != db {
		return control.Permanentf("replication slot %q belongs to database %q, not %q", name, st.Database, db)
	}
	return nil
}

// CreateExportingSnapshot creates the slot on a replication connection and
// exports its snapshot: a transaction that imports it sees exactly the
// commits the slot will not stream. On PostgreSQL 17 and later the slot is a
// failover slot, so a standby that synchronises slots keeps it — unless the
// server is itself a standby (decoding on a standby, 16+), where PostgreSQL
// refuses failover slots; there the snapshot can be imported only on that
// standby.
func CreateExportingSnapshot(ctx context.Context, conn *pgconn.PgConn, slot string) (pglogrepl.CreateReplicationSlotResult, error) {
	opts := []string{"SNAPSHOT 'export'"}
	if serverVersion(conn) >= 170000 && !InHotStandby(conn) {
		opts = append(opts, "FAILOVER true")
	}
	sql := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL %s (%s)", pgx.Identifier{slot}.Sanitize(), schema.OutputPlugin, strings.Join(opts, ", "))
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, sql))
	if err != nil {
		return res, fmt.Errorf("creating slot %s: %w", slot, err)
	}
	return res, nil
}

// MakeFailover turns on the failover property of an existing slot
// (PostgreSQL 17 and later).
func MakeFailover(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+pgx.Identifier{slot}.Sanitize()+" (FAILOVER true)").Close(); err != nil {
		return fmt.Errorf("making slot %s a failover slot: %w", slot, err)
	}
	return nil
}

// InHotStandby reports whether the server of conn was a standby in
// recovery when the connection started (the in_hot_standby parameter it
// reports, PostgreSQL 14+).
func InHotStandby(conn *pgconn.PgConn) bool { return conn.ParameterStatus("in_hot_standby") == "on" }

// serverVersion returns the server_version_num the connection reported, or
// 0 when it cannot be parsed.
func serverVersion(conn *pgconn.PgConn) int {
	v := conn.ParameterStatus("server_version")
	major, rest, _ := strings.Cut(v, ".")
	m, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	minor, _, _ := strings.Cut(rest, " ")
	n, _ := strconv.Atoi(minor)
	return m*10000 + n
}
