package cdc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/schema"
)

// recoverGap closes a gap (gap.go): it replaces the slot with a new one that
// exports its snapshot, republishes the snapshot's outbox rows from the
// checkpoint's published_below on, and records the recovery. Whatever fails
// leaves the gap in place for the next attempt: the new slot is confirmed
// past the unchanged limit, so the next session finds the gap again.
func (r *reader) recoverGap(ctx context.Context, ctl *control, reason string, st slotCheck, cp checkpointRow) error {
	r.m.gap.Set(1)
	r.logger.Error("replication slot gap: committed outbox rows may never have been published; recovering them from the outbox table",
		"reason", reason, "republish", describeFrom(cp.publishedBelow))
	r.prog.setRecovering(true)
	defer r.prog.setRecovering(false)

	if st.exists {
		if st.activePID != nil {
			return fmt.Errorf("%w (pid %d)", errSlotBusy, *st.activePID)
		}
		err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return schema.DropSlot(ctx, conn, r.cfg.Slot)
		})
		if err != nil {
			return fmt.Errorf("recreating slot %s: %w", r.cfg.Slot, err)
		}
	}

	rconn, err := r.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer rconn.Close(context.WithoutCancel(ctx))
	created, err := r.createRecoverySlot(ctx, ctl, rconn)
	if err != nil {
		return err
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("slot %s consistent point %q: %w", r.cfg.Slot, created.ConsistentPoint, err)
	}
	r.logger.Info("replication slot created for the recovery", "lsn", start.String(), "snapshot", created.SnapshotName)

	began := time.Now()
	n, snapXmin, err := r.republishSnapshot(ctx, ctl, created.SnapshotName, cp.publishedBelow, start)
	if err != nil {
		return fmt.Errorf("republishing the gap: %w", err)
	}
	err = ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO `+r.checkpoints.Sanitize()+` AS c
				(slot, confirm_limit, published_below, recovered_at, recovery_reason, recovered_events)
			VALUES ($1, $2::pg_lsn, $3, now(), $4, $5)
			ON CONFLICT (slot) DO UPDATE SET confirm_limit = excluded.confirm_limit,
				published_below = excluded.published_below, recovered_at = now(), updated_at = now(),
				recovery_reason = excluded.recovery_reason, recovered_events = excluded.recovered_events`,
			r.cfg.Slot, start.String(), snapXmin, reason, n)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the recovery of slot %s: %w", r.cfg.Slot, err)
	}
	r.m.gap.Set(0)
	r.m.gapRecoveries.Inc()
	r.m.gapRepublished.Add(float64(n))
	r.logger.Warn("replication slot gap recovered: republished outbox rows with their original event IDs; consumers skip the ones they applied",
		"events", n, "slot_lsn", start.String(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// createRecoverySlot creates the recovery's slot. Creating a logical slot
// waits until every transaction that held a transaction ID when it began
// has ended, anywhere in the cluster: a prepared transaction nobody
// resolves, or a session idle in a transaction, holds the recovery — and
// every order — until it ends. Meanwhile the reader logs what it waits for
// every checkpoint interval, and the leader's health (health.go) turns
// unhealthy, naming them, once it waited --unhealthy-after.
func (r *reader) createRecoverySlot(ctx context.Context, ctl *control, rconn *pgconn.PgConn) (pglogrepl.CreateReplicationSlotResult, error) {
	began := time.Now()
	r.prog.setCreating(began)
	defer r.prog.setCreating(time.Time{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		t := time.NewTicker(r.cfg.CheckpointInterval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			b, err := slotCreationBlockers(wctx, ctl, began)
			if err != nil || wctx.Err() != nil {
				continue
			}
			r.prog.setBlockers(b)
			r.logger.Warn("creating the replication slot waits for transactions that hold a transaction ID to end", "waited", time.Since(began).Round(time.Second), "blockers", b)
		}
	}()
	return createSlotExportingSnapshot(ctx, rconn, r.cfg.Slot)
}

// slotCreationBlockers describes the transactions that held a transaction
// ID before since: prepared transactions and sessions in a transaction.
func slotCreationBlockers(ctx context.Context, ctl *control, since time.Time) (string, error) {
	var b string
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(string_agg(x, '; '), '') FROM (
			SELECT format('prepared transaction %L since %s', gid, prepared) AS x FROM pg_prepared_xacts WHERE prepared < $1
			UNION ALL
			SELECT format('pid %s (%s, %s) in a transaction since %s', pid, coalesce(nullif(application_name, ''), 'no application_name'), state, xact_start)
			FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() AND xact_start < $1) s`, since).Scan(&b)
	})
	return b, err
}

// replicationConn opens a replication connection to the database.
func (r *reader) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	connCfg, err := pgconn.ParseConfig(r.cfg.DatabaseURL)
	if err != nil {
		return nil, permanent("parsing database-url: %w", err)
	}
	maps.Copy(connCfg.RuntimeParams, deadPeerParams)
	connCfg.RuntimeParams["replication"] = "database"
	connCfg.RuntimeParams["application_name"] = "eventforge-cdc"
	// The walsender ends a replication connection that sent no status
	// update for this long; the reader sends one every status interval.
	connCfg.RuntimeParams["wal_sender_timeout"] = "30s"
	conn, err := pgconn.ConnectConfig(ctx, connCfg)
	if err != nil {
		return nil, fmt.Errorf("opening replication connection: %w", err)
	}
	return conn, nil
}

// createSlotExportingSnapshot creates the slot on a replication connection
// and exports its snapshot: a transaction that imports it sees exactly the
// commits the slot will not stream. On PostgreSQL 17 and later the slot is a
// failover slot, so a standby that synchronises slots keeps it.
func createSlotExportingSnapshot(ctx context.Context, conn *pgconn.PgConn, slot string) (pglogrepl.CreateReplicationSlotResult, error) {
	opts := []string{"SNAPSHOT 'export'"}
	if serverVersion(conn) >= 170000 {
		opts = append(opts, "FAILOVER true")
	}
	sql := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL %s (%s)", pgx.Identifier{slot}.Sanitize(), schema.OutputPlugin, strings.Join(opts, ", "))
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, sql))
	if err != nil {
		return res, fmt.Errorf("creating slot %s: %w", slot, err)
	}
	return res, nil
}

// makeFailoverSlot turns on the failover property of an existing slot
// (PostgreSQL 17 and later).
func makeFailoverSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+pgx.Identifier{slot}.Sanitize()+" (FAILOVER true)").Close(); err != nil {
		return fmt.Errorf("making slot %s a failover slot: %w", slot, err)
	}
	return nil
}

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

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// errGapRefused means a gap was found and the reader may not create a slot.
var errGapRefused = errors.New("replication slot gap")
