package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/schema"
)

// checkServer validates what the relay needs of the server before it
// streams, so a misconfiguration stops the process at start with a message
// saying what to fix instead of surfacing late or never: wal_level, the
// publication (it exists, publishes inserts and includes the outbox table),
// the dead-letter and checkpoint tables and an existing slot (plugin
// pgoutput, this database); the server must be the primary.
func checkServer(ctx context.Context, ctl *control.Conn, cfg Config) error {
	ns, table := cfg.Outbox.Schema(), cfg.Outbox.Name()
	return ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var walLevel string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
			return fmt.Errorf("reading wal_level: %w", err)
		}
		if walLevel != "logical" {
			return control.Permanentf("postgres has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart)", walLevel)
		}
		var recovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
			return fmt.Errorf("reading pg_is_in_recovery: %w", err)
		}
		if recovery {
			// Retried, not permanent: a multi-host URL may reach the
			// primary next time.
			return errors.New("database-url reaches a standby (in recovery): the reader writes its leadership lock, heartbeats and checkpoints there, so it must reach the primary; to decode on a standby (PostgreSQL 16+), set --replication-url to the standby and keep --database-url on the primary")
		}
		var inserts, hasTable bool
		err := conn.QueryRow(ctx, `SELECT pubinsert, EXISTS (SELECT 1 FROM pg_publication_tables t
				WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3)
			FROM pg_publication p WHERE pubname = $1`, cfg.Publication, ns, table).Scan(&inserts, &hasTable)
		if errors.Is(err, pgx.ErrNoRows) {
			return control.Permanentf("publication %q does not exist in this database; run `eventforge migrate`", cfg.Publication)
		}
		if err != nil {
			return fmt.Errorf("looking up publication %s: %w", cfg.Publication, err)
		}
		if !hasTable {
			return control.Permanentf("outbox table %s is not in publication %q, so none of its rows would be streamed; check --outbox-table and --publication, or run ALTER PUBLICATION %s ADD TABLE %s",
				cfg.Outbox, cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize(), pgx.Identifier{ns, table}.Sanitize())
		}
		if !inserts {
			return control.Permanentf("publication %q does not publish inserts, so no outbox row would be streamed; run ALTER PUBLICATION %s SET (publish = 'insert')",
				cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize())
		}
		var dlq bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, cfg.DeadLetters.Sanitize()).Scan(&dlq); err != nil {
			return fmt.Errorf("looking up dead-letter table %s: %w", cfg.DeadLetters, err)
		}
		if !dlq {
			return control.Permanentf("dead-letter table %s does not exist; run `eventforge migrate` (or check --dead-letter-table)", cfg.DeadLetters)
		}
		db := conn.Config().Database
		st, err := schema.ReadSlotStatus(ctx, conn, cfg.Slot)
		switch {
		case cfg.ReplicationURL != "":
			// The slot is on the replication server (replication.go).
		case errors.Is(err, schema.ErrSlotNotFound):
			// Missing: created before the first session, or refused (package gap).
		case err != nil:
			return fmt.Errorf("looking up slot %s: %w", cfg.Slot, err)
		case st.Plugin == "": // only physical slots have no plugin
			return control.Permanentf("replication slot %q is a physical slot; the reader needs a logical slot with plugin %q (choose another --slot)", cfg.Slot, schema.OutputPlugin)
		case st.Plugin != schema.OutputPlugin:
			return control.Permanentf("replication slot %q uses plugin %q, want %q (drop it with `eventforge slot drop` or choose another --slot)", cfg.Slot, st.Plugin, schema.OutputPlugin)
		case st.Database != db:
			return control.Permanentf("replication slot %q belongs to another database, not %q (choose another --slot)", cfg.Slot, db)
		}
		var checkpoints bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, cfg.Gap.Checkpoints.Sanitize()).Scan(&checkpoints); err != nil {
			return fmt.Errorf("looking up checkpoint table %s: %w", cfg.Gap.Checkpoints, err)
		}
		if !checkpoints {
			return control.Permanentf("checkpoint table %s does not exist; run `eventforge migrate` (or check --checkpoint-table)", cfg.Gap.Checkpoints)
		}
		// A missing slot is created, with its gap recovered, before the
		// first session (package gap).
		return nil
	})
}

// tryLock tries to take the leadership lock of the slot: a session-level
// advisory lock held by the control connection until it closes. Exactly one
// process per slot and database holds it.
func tryLock(ctx context.Context, ctl *control.Conn, slot string) (bool, error) {
	var ok bool
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('eventforge.cdc'), hashtext($1))`, slot).Scan(&ok)
	})
	if err != nil {
		return false, fmt.Errorf("trying the leadership lock of slot %s: %w", slot, err)
	}
	return ok, nil
}

// slotStats reads the slot's lag and retained WAL in bytes.
func slotStats(ctx context.Context, ctl *control.Conn, slot string) (lag, retained int64, err error) {
	var st schema.SlotStatus
	err = ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
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

// oldestCreatedAfter returns the age in seconds, by the server's clock, of
// the oldest outbox row created after t, or 0 when there is none.
func oldestCreatedAfter(ctx context.Context, ctl *control.Conn, table outbox.Table, t time.Time) (float64, error) {
	var age float64
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 FROM `+
			table.Sanitize()+` WHERE created_at > $1`, t).Scan(&age)
	})
	if err != nil {
		return 0, fmt.Errorf("reading the oldest unpublished outbox row: %w", err)
	}
	return max(age, 0), nil
}
