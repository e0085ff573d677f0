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

// checkServer validates wal_level and the publication, and creates the slot
// when it is missing and creation is allowed.
func checkServer(ctx context.Context, ctl *control, cfg Config, logger *slog.Logger) error {
	return ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var walLevel string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
			return fmt.Errorf("reading wal_level: %w", err)
		}
		if walLevel != "logical" {
			return permanent("postgres has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart)", walLevel)
		}
		var pubExists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", cfg.Publication).Scan(&pubExists); err != nil {
			return fmt.Errorf("looking up publication: %w", err)
		}
		if !pubExists {
			return permanent("publication %q does not exist in this database; run `eventforge migrate`", cfg.Publication)
		}
		if cfg.NoCreateSlot {
			return nil
		}
		created, err := schema.EnsureSlot(ctx, conn, cfg.Slot)
		if err != nil {
			return err
		}
		if created {
			logger.Warn("created replication slot; outbox rows committed before this moment are not streamed (create the slot with `eventforge migrate` before the first order)")
		}
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
	err = ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag, &retained)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading statistics of slot %s: %w", slot, err)
	}
	return lag, retained, nil
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

// pruneOutbox deletes outbox rows older than retention, batch rows per
// statement, and returns how many it deleted. Rows are deleted only after
// the retention: decoding reads the WAL, never the table, so deleting a row
// never loses its event; it only removes it from `outbox replay`.
func pruneOutbox(ctx context.Context, ctl *control, table pgx.Identifier, retention time.Duration, batch int) (int64, error) {
	var total int64
	stmt := `DELETE FROM ` + table.Sanitize() + ` WHERE id IN (SELECT id FROM ` + table.Sanitize() +
		` WHERE created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT $2)`
	for {
		var n int64
		err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			tag, err := conn.Exec(ctx, stmt, retention.Seconds(), batch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("pruning outbox rows older than %s: %w", retention, err)
		}
		total += n
		if n < int64(batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}
