package cdc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
	"github.com/eventforge/eventforge/schema"
)

// gapRowsStatement selects the outbox rows a recovery republishes: those
// inserted by a transaction at or above $1 (all rows when $1 is NULL), in
// transaction order, then creation order. The row's 32-bit xmin is widened
// against the snapshot's xmax as retention.go explains.
const gapRowsStatement = `WITH ref AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x),
rows AS (
	SELECT o.id::text AS id, o.aggregatetype, o.aggregateid, o.type, o.payload::text AS payload, o.headers::text AS headers,
		o.created_at::text AS created_at, o.created_at AS created_ts,
		ref.x - ((ref.x %% 4294967296) - o.xmin::text::bigint + 4294967296) %% 4294967296 AS xid
	FROM %s o, ref)
SELECT id, aggregatetype, aggregateid, type, payload, headers, created_at, xid FROM rows
WHERE $1::bigint IS NULL OR xid >= $1
ORDER BY xid, created_ts, id`

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
	created, err := createSlotExportingSnapshot(ctx, rconn, r.cfg.Slot)
	if err != nil {
		return err
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("slot %s consistent point %q: %w", r.cfg.Slot, created.ConsistentPoint, err)
	}
	r.logger.Info("replication slot created for the recovery", "lsn", start.String(), "snapshot", created.SnapshotName)

	began := time.Now()
	n, snapXmin, err := r.republishSnapshot(ctx, created.SnapshotName, cp.publishedBelow)
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

// republishSnapshot publishes, within the exported snapshot, every outbox
// row inserted by a transaction at or above from (every row when from is
// nil), waits for Kafka to acknowledge all of them, and returns how many it
// published and the snapshot's xmin: every transaction below it is in the
// snapshot, so its rows are now published.
func (r *reader) republishSnapshot(ctx context.Context, snapshot string, from *int64) (int64, int64, error) {
	conn, err := pgx.Connect(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return 0, 0, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, 0, fmt.Errorf("beginning the snapshot transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT `+quoteLiteral(snapshot)); err != nil {
		return 0, 0, fmt.Errorf("importing snapshot %s: %w", snapshot, err)
	}
	var xmin int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
		return 0, 0, fmt.Errorf("reading the snapshot's xmin: %w", err)
	}

	var (
		acked    atomic.Int64
		failMu   sync.Mutex
		failed   error
		inflight = make(chan struct{}, r.cfg.MaxInflightEvents)
	)
	pub, err := publish.New(publish.Options{
		Bootstrap: r.cfg.KafkaBrokers,
		ClientID:  "eventforge-cdc-recovery",
		Router:    publish.Router{Topics: r.cfg.Topics, Fallback: r.cfg.TopicFallback},
		Extra:     producerSettings(r.cfg),
	}, r.logger, func(opaque any, err error) {
		<-inflight
		if err != nil {
			failMu.Lock()
			if failed == nil {
				failed = fmt.Errorf("delivering event %s: %w", opaque.(string), err)
			}
			failMu.Unlock()
			return
		}
		acked.Add(1)
		r.m.published.Inc()
	})
	if err != nil {
		return 0, 0, err
	}
	closed := false
	defer func() {
		if !closed {
			pub.Close(0)
		}
	}()

	sent, err := r.publishGapRows(ctx, tx, from, pub, inflight)
	if err != nil {
		return 0, 0, err
	}
	closed = true
	if left := pub.Close(r.cfg.FlushTimeout); left > 0 {
		return 0, 0, fmt.Errorf("%d of %d records not acknowledged within %s", left, sent, r.cfg.FlushTimeout)
	}
	failMu.Lock()
	defer failMu.Unlock()
	if failed != nil {
		return 0, 0, failed
	}
	if got := acked.Load(); got != sent {
		return 0, 0, fmt.Errorf("%d of %d records acknowledged", got, sent)
	}
	return sent, xmin, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// errGapRefused means a gap was found and the reader may not create a slot.
var errGapRefused = errors.New("replication slot gap")

// publishGapRows hands pub every outbox row of the snapshot transaction tx
// after from, holding a slot of inflight per record until its delivery
// report; it returns how many it handed over.
func (r *reader) publishGapRows(ctx context.Context, tx pgx.Tx, from *int64, pub *publish.Publisher, inflight chan struct{}) (int64, error) {
	var sent int64
	rows, err := tx.Query(ctx, fmt.Sprintf(gapRowsStatement, r.table.Sanitize()), from)
	if err != nil {
		return sent, fmt.Errorf("reading the outbox: %w", err)
	}
	for rows.Next() {
		var ev decode.Event
		var payload, headers string
		var xid int64
		if err := rows.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &payload, &headers, &ev.CreatedAt, &xid); err != nil {
			rows.Close()
			return sent, fmt.Errorf("reading an outbox row: %w", err)
		}
		ev.Payload = []byte(payload)
		ev.HeadersJSON = headers
		if ev.Headers, err = decode.ParseHeaders(ev.ID, headers); err != nil {
			rows.Close()
			return sent, err
		}
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			rows.Close()
			return sent, ctx.Err()
		}
		if err := pub.Publish(ctx, &ev, xid, ev.ID); err != nil {
			<-inflight
			rows.Close()
			return sent, err
		}
		sent++
	}
	if err := rows.Err(); err != nil {
		return sent, fmt.Errorf("reading the outbox: %w", err)
	}
	return sent, nil
}
