package gap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/sink"
)

// Republishing a gap (recover.go) from the exported snapshot of the new slot.
//
// The rows come from the outbox table and from its table of deleted rows
// (<outbox>_deleted, kept by a trigger, so that a writer that deletes its
// row in the same transaction is covered too), from the transaction
// published_below on, in commit order: by commit timestamp when the server
// tracks them (track_commit_timestamp), else by transaction ID — commit
// order for writers whose transactions on one order start after the
// previous one committed, as the order API's do. Rows waiting in the
// dead-letter table are left there for the operator's replay.
//
// A gap is republished like a stream: a row no record can be built from
// (headers that are not a JSON object of strings) is dead-lettered at once;
// a record Kafka refuses becomes a suspect, and once the first pass is done
// each suspect is produced alone, after everything before it, and
// dead-lettered when Kafka refuses it again; the rows the publisher held
// back behind it (later events of its order) follow in commit order. So one
// record Kafka can never take does not stop the recovery, which would
// otherwise start over, fail again and stop every order.

// gapRowsStatement selects a gap's rows from the union rows (see
// gapRowsQuery): those of transactions at or above $1 (all when NULL), or
// only the event IDs $2 when it is not NULL, not waiting in the dead-letter
// table %[2]s, ordered by %[3]s.
const gapRowsStatement = `WITH ref AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x),
rows AS (%[1]s)
SELECT id, aggregatetype, aggregateid, type, payload, headers, created_at, xid FROM rows
WHERE ($1::bigint IS NULL OR xid >= $1) AND ($2::text[] IS NULL OR id = ANY($2))
AND NOT EXISTS (SELECT FROM %[2]s d WHERE d.event_id = rows.id AND d.replayed_at IS NULL)
ORDER BY %[3]sxid, created_ts, id`

// gapTableRows reads one table of outbox rows; the row's 32-bit xmin is
// widened against the snapshot's xmax as package retention explains.
const gapTableRows = `SELECT o.id::text AS id, o.aggregatetype, o.aggregateid, o.type, o.payload::text AS payload, o.headers::text AS headers,
		o.created_at::text AS created_at, o.created_at AS created_ts, o.xmin AS raw_xmin,
		ref.x - ((ref.x %% 4294967296) - o.xmin::text::bigint + 4294967296) %% 4294967296 AS xid
	FROM %s o, ref`

// gapRowsQuery builds the statement over the outbox table and, when it is
// not nil, its table of deleted rows.
func gapRowsQuery(table, deleted, deadLetters outbox.Table, commitTimestamps bool) string {
	tables := fmt.Sprintf(gapTableRows, table.Sanitize())
	if deleted != nil {
		tables += "\n\tUNION ALL\n\t" + fmt.Sprintf(gapTableRows, deleted.Sanitize())
	}
	order := ""
	if commitTimestamps {
		order = "pg_xact_commit_timestamp(raw_xmin) NULLS FIRST, "
	}
	return fmt.Sprintf(gapRowsStatement, tables, deadLetters.Sanitize(), order)
}

// maxGapFailures bounds the failed records a gap republish remembers for its
// second pass; beyond it the recovery fails and starts over.
const maxGapFailures = 10000

// gapDeliveries collects the outcomes of a pass.
type gapDeliveries struct {
	mu       sync.Mutex
	sent     int64
	reported int64
	acked    int64
	failed   map[string]error // by event ID, until dealt with
	settled  chan struct{}    // a delivery was reported
	last     time.Time        // when the last one was
}

func newGapDeliveries() *gapDeliveries {
	return &gapDeliveries{failed: map[string]error{}, settled: make(chan struct{}, 1), last: time.Now()}
}

func (d *gapDeliveries) report(id string, err error) {
	d.mu.Lock()
	d.reported++
	if err == nil {
		d.acked++
	} else {
		d.failed[id] = err
	}
	d.last = time.Now()
	d.mu.Unlock()
	select {
	case d.settled <- struct{}{}:
	default:
	}
}

// wait returns once every record sent was reported, or an error when none
// was for stall (Kafka unreachable: the recovery starts over later).
func (d *gapDeliveries) wait(ctx context.Context, stall time.Duration) error {
	for {
		d.mu.Lock()
		done := d.reported >= d.sent
		quiet := time.Since(d.last)
		d.mu.Unlock()
		if done {
			return nil
		}
		if quiet >= stall {
			return fmt.Errorf("no delivery report for %s: %w", stall.Round(time.Second), errGapStalled)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.settled:
		case <-time.After(stall - quiet):
		}
	}
}

var errGapStalled = errors.New("kafka did not acknowledge the gap")

// gapPass is one pass of a republish: its publisher and the outcomes.
type gapPass struct {
	pub      sink.Sink
	router   sink.Router
	out      *gapDeliveries
	inflight chan struct{}
	// txn is pub when it is transactional: what the pass publishes is
	// stored only at its commits, with pos.
	txn sink.Transactional
	pos sink.Position
}

// newPass opens a pass whose transactional commits, if any, record pos.
func (g *Guard) newPass(pos sink.Position) (*gapPass, error) {
	p := &gapPass{router: g.router, out: newGapDeliveries(), inflight: make(chan struct{}, g.cfg.MaxInflight), pos: pos}
	pub, err := g.driver.Open("eventforge-cdc-recovery", func(opaque any, err error) {
		<-p.inflight
		if err == nil {
			g.m.Published.Inc()
		}
		p.out.report(opaque.(string), err)
	})
	if err != nil {
		return nil, err
	}
	p.pub = pub
	p.txn, _ = pub.(sink.Transactional)
	return p, nil
}

// settle commits what a transactional pass published (a commit that fails
// reports each of its records failed, for the next pass).
func (p *gapPass) settle(ctx context.Context) {
	if p.txn != nil {
		_ = p.txn.Commit(ctx, p.pos)
	}
}

// publish hands one row to Kafka in its transaction's group.
func (p *gapPass) publish(ctx context.Context, ev *decode.Event, xid int64) error {
	if p.txn != nil && len(p.inflight) == cap(p.inflight) {
		p.settle(ctx)
	}
	select {
	case p.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.out.mu.Lock()
	p.out.sent++
	p.out.mu.Unlock()
	if err := p.pub.Publish(ctx, ev, p.router.Topic(ev.AggregateType), xid, ev.ID); err != nil {
		<-p.inflight
		p.out.report(ev.ID, err)
	}
	return nil
}

// republishSnapshot publishes, within the exported snapshot, every row of
// the gap from the transaction from on (every row when from is nil),
// dead-letters what Kafka can never take (at lsn, the new slot's start),
// and returns how many rows it settled — published or dead-lettered — and
// the snapshot's xmin: every transaction below it is in the snapshot, so
// its rows are now settled.
//
// On a transactional sink (sink.TransactionalDriver) the rows the sink
// already holds — stamped from a little before since, when the mark behind
// from was taken — are left out, so the recovery adds no duplicate for a
// read_committed reader, and every commit records the new slot's start as
// the position of the new generation.
func (g *Guard) republish(ctx context.Context, snapshot string, from *int64, since *time.Time, lsn pglogrepl.LSN) (int64, int64, error) {
	conn, err := pgx.Connect(ctx, g.cfg.DatabaseURL)
	if err != nil {
		return 0, 0, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, 0, fmt.Errorf("beginning the snapshot transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rp := &gapRepublish{g: g, tx: tx, from: from, lsn: lsn, pos: sink.Position{LSN: uint64(lsn), Generation: lsn.String()}}
	xmin, err := rp.importSnapshot(ctx, snapshot)
	if err != nil {
		return 0, 0, err
	}
	if td, ok := g.driver.(sink.TransactionalDriver); ok {
		if rp.skip, err = rp.published(ctx, td, since); err != nil {
			return 0, 0, err
		}
	}
	failed, err := rp.firstPass(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(failed) > 0 {
		if err := rp.secondPass(ctx, failed); err != nil {
			return 0, 0, err
		}
	}
	return rp.settled, xmin, nil
}

// publishedSlack is how far before the mark behind published_below a
// transactional recovery looks for records the sink holds (clocks of the
// relay's and the database's hosts may differ).
const publishedSlack = 5 * time.Minute

// published reads the event IDs the sink holds for the gap's topics since
// the mark (the whole topics when there is none).
func (rp *gapRepublish) published(ctx context.Context, td sink.TransactionalDriver, since *time.Time) (map[string]bool, error) {
	topics := map[string]bool{}
	err := eachGapRow(ctx, rp.tx, rp.query, rp.from, nil, func(ev *decode.Event, _ int64, _ error) error {
		topics[rp.g.router.Topic(ev.AggregateType)] = true
		return nil
	})
	if err != nil || len(topics) == 0 {
		return nil, err
	}
	var from time.Time
	if since != nil {
		from = since.Add(-publishedSlack)
	}
	held, err := td.Published(ctx, slices.Sorted(maps.Keys(topics)), from)
	if err != nil {
		return nil, fmt.Errorf("reading what the sink holds of the gap: %w", err)
	}
	return held, nil
}

// gapRepublish is one republish of a gap in its snapshot transaction.
type gapRepublish struct {
	g *Guard
	// pos is the position a transactional sink's commits record: the new
	// slot's start, of the new generation.
	pos sink.Position
	// skip are the event IDs a transactional sink already holds.
	skip    map[string]bool
	tx      pgx.Tx
	from    *int64
	lsn     pglogrepl.LSN
	query   string
	settled int64 // rows published or dead-lettered
}

// importSnapshot makes tx see the slot's snapshot, builds the query for
// what the server offers, and returns the snapshot's xmin.
func (rp *gapRepublish) importSnapshot(ctx context.Context, snapshot string) (int64, error) {
	g := rp.g
	if _, err := rp.tx.Exec(ctx, `SET TRANSACTION SNAPSHOT `+quoteLiteral(snapshot)); err != nil {
		return 0, fmt.Errorf("importing snapshot %s: %w", snapshot, err)
	}
	var (
		xmin      int64
		commitTS  string
		deletedOK bool
	)
	deleted := g.cfg.Outbox.Deleted()
	err := rp.tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, current_setting('track_commit_timestamp'), to_regclass($1) IS NOT NULL`,
		deleted.Sanitize()).Scan(&xmin, &commitTS, &deletedOK)
	if err != nil {
		return 0, fmt.Errorf("reading the snapshot's xmin: %w", err)
	}
	if !deletedOK {
		g.logger.Warn("no table of deleted outbox rows: rows deleted in the transaction that wrote them cannot be republished", "table", deleted.Sanitize())
		deleted = nil
	}
	if commitTS != "on" {
		g.logger.Warn("track_commit_timestamp is off: the gap is republished in transaction-ID order, which is commit order only for writers whose transactions on one order start after the previous one committed (as the order API's do)")
	}
	rp.query = gapRowsQuery(g.cfg.Outbox, deleted, g.cfg.DeadLetters, commitTS == "on")
	return xmin, nil
}

// firstPass publishes every row, pipelined, dead-letters the ones no
// record can be built from, and returns the failures by event ID.
func (rp *gapRepublish) firstPass(ctx context.Context) (map[string]error, error) {
	g := rp.g
	first, err := g.newPass(rp.pos)
	if err != nil {
		return nil, err
	}
	err = eachGapRow(ctx, rp.tx, rp.query, rp.from, nil, func(ev *decode.Event, xid int64, headersErr error) error {
		if rp.skip[ev.ID] {
			rp.settled++
			return nil
		}
		if headersErr != nil {
			rp.settled++
			return g.dead.Store(ctx, ev, rp.lsn, headersErr)
		}
		return first.publish(ctx, ev, xid)
	})
	if err == nil {
		first.settle(ctx)
		err = first.out.wait(ctx, g.cfg.Stall)
	}
	first.pub.Close(0)
	if err != nil {
		return nil, err
	}
	rp.settled += first.out.acked
	if len(first.out.failed) > maxGapFailures {
		return nil, fmt.Errorf("%d records failed", len(first.out.failed))
	}
	return first.out.failed, nil
}

// secondPass republishes the failed rows in commit order, each suspect —
// a record Kafka refused — alone, after everything before it and before
// anything after it, dead-lettering it when refused again.
func (rp *gapRepublish) secondPass(ctx context.Context, failed map[string]error) error {
	g := rp.g
	ids := make([]string, 0, len(failed))
	for id := range failed {
		ids = append(ids, id)
	}
	g.logger.Info("republishing the records of the gap that failed; those Kafka refused, each alone", "events", len(ids))
	second, err := g.newPass(rp.pos)
	if err != nil {
		return err
	}
	defer second.pub.Close(0)
	err = eachGapRow(ctx, rp.tx, rp.query, rp.from, ids, func(ev *decode.Event, xid int64, _ error) error {
		if !g.driver.Permanent(failed[ev.ID]) {
			return second.publish(ctx, ev, xid)
		}
		cause, err := second.alone(ctx, ev, xid, g.cfg.Stall, g.driver.Permanent)
		if err != nil || cause == nil {
			return err
		}
		rp.settled++
		return g.dead.Store(ctx, ev, rp.lsn, fmt.Errorf("delivering event %s: %w", ev.ID, cause))
	})
	if err == nil {
		second.settle(ctx)
		err = second.out.wait(ctx, g.cfg.Stall)
	}
	if err != nil {
		return err
	}
	for id, err := range second.out.failed {
		return fmt.Errorf("delivering event %s: %w", id, err)
	}
	rp.settled += second.out.acked
	return nil
}

// alone produces ev after everything in flight was reported and waits for
// its outcome; it returns the refusal when Kafka refused it permanently
// (no longer counted as failed), nil when it was acknowledged or failed
// otherwise (left in failed).
func (p *gapPass) alone(ctx context.Context, ev *decode.Event, xid int64, stall time.Duration, permanent func(error) bool) (refusal error, err error) {
	p.settle(ctx)
	if err := p.out.wait(ctx, stall); err != nil {
		return nil, err
	}
	if err := p.publish(ctx, ev, xid); err != nil {
		return nil, err
	}
	p.settle(ctx)
	if err := p.out.wait(ctx, stall); err != nil {
		return nil, err
	}
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	if cause, failed := p.out.failed[ev.ID]; failed && permanent(cause) {
		delete(p.out.failed, ev.ID)
		return cause, nil
	}
	return nil, nil
}

// eachGapRow calls f for each row of query in the snapshot transaction tx,
// with the row's headers error (decode.ErrMalformedHeaders) if any.
func eachGapRow(ctx context.Context, tx pgx.Tx, query string, from *int64, ids []string,
	f func(ev *decode.Event, xid int64, headersErr error) error) error {
	var only any
	if ids != nil {
		only = ids
	}
	rows, err := tx.Query(ctx, query, from, only)
	if err != nil {
		return fmt.Errorf("reading the outbox: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ev               decode.Event
			payload, headers string
			xid              int64
		)
		if err := rows.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &payload, &headers, &ev.CreatedAt, &xid); err != nil {
			return fmt.Errorf("reading an outbox row: %w", err)
		}
		ev.Payload = []byte(payload)
		ev.HeadersJSON = headers
		var herr error
		if ev.Headers, herr = decode.ParseHeaders(ev.ID, headers); herr != nil && !errors.Is(herr, decode.ErrMalformedHeaders) {
			return herr
		}
		if err := f(&ev, xid, herr); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the outbox: %w", err)
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
