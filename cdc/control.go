package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/schema"
)

// controlQueryTimeout bounds every statement on the control connection. A
// statement that times out breaks the connection, which releases the
// leadership lock, so the reader stops publishing.
const controlQueryTimeout = 15 * time.Second

// HeartbeatPrefix is the prefix of the reader's pg_logical_emit_message
// heartbeats.
const HeartbeatPrefix = "eventforge.cdc.heartbeat"

// control is the reader's ordinary (non-replication) connection. It holds the
// leadership lock for as long as it lives, emits heartbeats, reads slot
// statistics and prunes the outbox. Statements on it are serialised.
type control struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// do runs f on the connection, alone and within controlQueryTimeout.
func (c *control) do(ctx context.Context, f func(ctx context.Context, conn *pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, controlQueryTimeout)
	defer cancel()
	return f(ctx, c.conn)
}

// closed reports whether the connection is closed, and with it the
// leadership lock released.
func (c *control) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.IsClosed()
}

// checkServer validates what the reader needs of the server before it
// streams, so a misconfiguration stops the process at start with a message
// saying what to fix instead of surfacing late or never: wal_level, the
// publication (it exists, publishes inserts and includes the outbox table),
// the dead-letter and checkpoint tables and an existing slot (plugin
// pgoutput, this database).
func checkServer(ctx context.Context, ctl *control, cfg Config, logger *slog.Logger) error {
	ns, table, _ := strings.Cut(cfg.OutboxTable, ".")
	return ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var walLevel string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
			return fmt.Errorf("reading wal_level: %w", err)
		}
		if walLevel != "logical" {
			return permanent("postgres has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart)", walLevel)
		}
		var inserts, hasTable bool
		err := conn.QueryRow(ctx, `SELECT pubinsert, EXISTS (SELECT 1 FROM pg_publication_tables t
				WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3)
			FROM pg_publication p WHERE pubname = $1`, cfg.Publication, ns, table).Scan(&inserts, &hasTable)
		if errors.Is(err, pgx.ErrNoRows) {
			return permanent("publication %q does not exist in this database; run `eventforge migrate`", cfg.Publication)
		}
		if err != nil {
			return fmt.Errorf("looking up publication %s: %w", cfg.Publication, err)
		}
		if !hasTable {
			return permanent("outbox table %s is not in publication %q, so none of its rows would be streamed; check --outbox-table and --publication, or run ALTER PUBLICATION %s ADD TABLE %s",
				cfg.OutboxTable, cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize(), pgx.Identifier{ns, table}.Sanitize())
		}
		if !inserts {
			return permanent("publication %q does not publish inserts, so no outbox row would be streamed; run ALTER PUBLICATION %s SET (publish = 'insert')",
				cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize())
		}
		var dlq bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, cfg.DeadLetterTable).Scan(&dlq); err != nil {
			return fmt.Errorf("looking up dead-letter table %s: %w", cfg.DeadLetterTable, err)
		}
		if !dlq {
			return permanent("dead-letter table %s does not exist; run `eventforge migrate` (or check --dead-letter-table)", cfg.DeadLetterTable)
		}
		db := conn.Config().Database
		st, err := schema.ReadSlotStatus(ctx, conn, cfg.Slot)
		switch {
		case errors.Is(err, schema.ErrSlotNotFound):
			// Missing: created below, or refused by readSlot.
		case err != nil:
			return fmt.Errorf("looking up slot %s: %w", cfg.Slot, err)
		case st.Plugin == "": // only physical slots have no plugin
			return permanent("replication slot %q is a physical slot; the reader needs a logical slot with plugin %q (choose another --slot)", cfg.Slot, schema.OutputPlugin)
		case st.Plugin != schema.OutputPlugin:
			return permanent("replication slot %q uses plugin %q, want %q (drop it with `eventforge slot drop` or choose another --slot)", cfg.Slot, st.Plugin, schema.OutputPlugin)
		case st.Database != db:
			return permanent("replication slot %q belongs to another database, not %q (choose another --slot)", cfg.Slot, db)
		}
		var checkpoints bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, cfg.CheckpointTable).Scan(&checkpoints); err != nil {
			return fmt.Errorf("looking up checkpoint table %s: %w", cfg.CheckpointTable, err)
		}
		if !checkpoints {
			return permanent("checkpoint table %s does not exist; run `eventforge migrate` (or check --checkpoint-table)", cfg.CheckpointTable)
		}
		// A missing slot is created, with its gap recovered, before the
		// first session (gap.go).
		return nil
	})
}

// tryLock tries to take the leadership lock of the slot: a session-level
// advisory lock held by the control connection until it closes. Exactly one
// process per slot and database holds it.
func tryLock(ctx context.Context, ctl *control, slot string) (bool, error) {
	var ok bool
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('eventforge.cdc'), hashtext($1))`, slot).Scan(&ok)
	})
	if err != nil {
		return false, fmt.Errorf("trying the leadership lock of slot %s: %w", slot, err)
	}
	return ok, nil
}

// slotStats reads the slot's lag and retained WAL in bytes.
func slotStats(ctx context.Context, ctl *control, slot string) (lag, retained int64, err error) {
	var st schema.SlotStatus
	err = ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		st, err = schema.ReadSlotStatus(ctx, conn, slot)
		return err
	})
	if errors.Is(err, schema.ErrSlotNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading statistics of slot %s: %w", slot, err)
	}
	return st.LagBytes, st.RetainedWALBytes, nil
}

// emitHeartbeat writes a non-transactional logical decoding message carrying
// nonce and the send time; the reader measures its round trip when the slot
// delivers it.
func emitHeartbeat(ctx context.Context, ctl *control, nonce string, at time.Time) error {
	payload := nonce + "/" + strconv.FormatInt(at.UnixNano(), 10)
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1::text, $2::text)`, HeartbeatPrefix, payload)
		return err
	})
	if err != nil {
		return fmt.Errorf("emitting heartbeat: %w", err)
	}
	return nil
}

// parseHeartbeat splits a heartbeat payload into its nonce and send time.
func parseHeartbeat(content []byte) (nonce string, sentAt time.Time, ok bool) {
	n, ts, found := strings.Cut(string(content), "/")
	if !found {
		return "", time.Time{}, false
	}
	ns, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return n, time.Unix(0, ns), true
}

// oldestCreatedAfter returns the age in seconds, by the server's clock, of
// the oldest outbox row created after t, or 0 when there is none.
func oldestCreatedAfter(ctx context.Context, ctl *control, table pgx.Identifier, t time.Time) (float64, error) {
	var age float64
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 FROM `+
			table.Sanitize()+` WHERE created_at > $1`, t).Scan(&age)
	})
	if err != nil {
		return 0, fmt.Errorf("reading the oldest unpublished outbox row: %w", err)
	}
	return max(age, 0), nil
}
