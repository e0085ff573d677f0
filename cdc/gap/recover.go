package gap

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/slot"
	"github.com/eventforge/eventforge/schema"
)

// recover closes a gap: it replaces the slot with a new one that
// exports its snapshot, republishes the snapshot's outbox rows from the
// checkpoint's published_below on, and records the recovery. Whatever fails
// leaves the gap in place for the next attempt: the new slot is confirmed
// past the unchanged limit, so the next session finds the gap again.
func (g *Guard) recover(ctx context.Context, reason string, st slot.State, cp Checkpoint) error {
	g.m.Gap.Set(1)
	g.logger.Error("replication slot gap: committed outbox rows may never have been published; recovering them from the outbox table",
		"reason", reason, "republish", describeFrom(cp.PublishedBelow))
	g.prog.SetRecovering(true)
	defer g.prog.SetRecovering(false)

	if st.Exists {
		if st.ActivePID != nil {
			return fmt.Errorf("%w (pid %d)", slot.ErrBusy, *st.ActivePID)
		}
		err := g.slots.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return schema.DropSlot(ctx, conn, g.cfg.Slot)
		})
		if err != nil {
			return fmt.Errorf("recreating slot %s: %w", g.cfg.Slot, err)
		}
	}

	rconn, err := control.OpenReplication(ctx, g.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer rconn.Close(context.WithoutCancel(ctx))
	created, err := g.createSlot(ctx, rconn)
	createdAt := time.Now()
	if err != nil {
		return err
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("slot %s consistent point %q: %w", g.cfg.Slot, created.ConsistentPoint, err)
	}
	g.logger.Info("replication slot created for the recovery", "lsn", start.String(), "snapshot", created.SnapshotName)

	began := time.Now()
	n, snapXmin, err := g.republish(ctx, created.SnapshotName, cp.PublishedBelow, cp.PublishedBelowAt, start)
	if err != nil {
		return fmt.Errorf("republishing the gap: %w", err)
	}
	err = g.ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO `+g.cfg.Checkpoints.Sanitize()+` AS c
				(slot, confirm_limit, published_below, published_below_at, generation, recovered_at, recovery_reason, recovered_events)
			VALUES ($1, $2::pg_lsn, $3, $6, $2::text, now(), $4, $5)
			ON CONFLICT (slot) DO UPDATE SET confirm_limit = excluded.confirm_limit,
				published_below = excluded.published_below, published_below_at = excluded.published_below_at,
				generation = excluded.generation, recovered_at = now(), updated_at = now(),
				recovery_reason = excluded.recovery_reason, recovered_events = excluded.recovered_events`,
			g.cfg.Slot, start.String(), snapXmin, reason, n, createdAt)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the recovery of slot %s: %w", g.cfg.Slot, err)
	}
	g.m.Gap.Set(0)
	g.m.GapRecoveries.Inc()
	g.m.GapRepublished.Add(float64(n))
	g.logger.Warn("replication slot gap recovered: republished outbox rows with their original event IDs; consumers skip the ones they applied",
		"events", n, "slot_lsn", start.String(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// createRecoverySlot creates the recovery's slot. Creating a logical slot
// waits until every transaction that held a transaction ID when it began
// has ended, anywhere in the cluster: a prepared transaction nobody
// resolves, or a session idle in a transaction, holds the recovery — and
// every order — until it ends. On a standby (decoding there) it also waits
// for the primary to log its running transactions (logStandbySnapshots).
// Meanwhile the relay logs what it waits for every checkpoint interval, and
// the leader's health (package leader) turns unhealthy, naming them, once
// it waited --unhealthy-after.
func (g *Guard) createSlot(ctx context.Context, rconn *pgconn.PgConn) (pglogrepl.CreateReplicationSlotResult, error) {
	began := time.Now()
	g.prog.SetCreating(began)
	defer g.prog.SetCreating(time.Time{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	onStandby := slot.InHotStandby(rconn)
	go func() {
		t := time.NewTicker(g.cfg.LogEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			b, err := slotCreationBlockers(wctx, g.ctl, began)
			if err != nil || wctx.Err() != nil {
				continue
			}
			g.prog.SetBlockers(b)
			if onStandby && b == "" {
				g.logger.Info("creating the replication slot on the standby waits for the primary to log its running transactions", "waited", time.Since(began).Round(time.Second))
				continue
			}
			g.logger.Warn("creating the replication slot waits for transactions that hold a transaction ID to end", "waited", time.Since(began).Round(time.Second), "blockers", b)
		}
	}()
	if onStandby {
		go g.logStandbySnapshots(wctx)
	}
	return slot.CreateExportingSnapshot(ctx, rconn, g.cfg.Slot)
}

// logStandbySnapshots asks the primary to log its running transactions
// every second until ctx ends. A logical slot created on a standby becomes
// consistent only once the standby replays such a record, which the primary
// otherwise logs about every 15 s (and only while it writes).
// pg_log_standby_snapshot is for superusers unless granted: refused, the
// creation waits for the primary's own records.
func (g *Guard) logStandbySnapshots(ctx context.Context) {
	for {
		err := g.ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			return err
		})
		if err != nil && ctx.Err() == nil {
			g.logger.Info("creating the slot on the standby waits for the primary to log its running transactions (about every 15 s); GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() to the reader's role on the primary to speed it up", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// slotCreationBlockers describes the transactions that held a transaction
// ID before since: prepared transactions and sessions in a transaction.
func slotCreationBlockers(ctx context.Context, ctl *control.Conn, since time.Time) (string, error) {
	var b string
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(string_agg(x, '; '), '') FROM (
			SELECT format('prepared transaction %L since %s', gid, prepared) AS x FROM pg_prepared_xacts WHERE prepared < $1
			UNION ALL
			SELECT format('pid %s (%s, %s) in a transaction since %s', pid, coalesce(nullif(application_name, ''), 'no application_name'), state, xact_start)
			FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() AND xact_start < $1) s`, since).Scan(&b)
	})
	return b, err
}
