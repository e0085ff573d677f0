package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
)

// outboxEvent is one row of the outbox snapshot, in commit order.
type outboxEvent struct {
	id, key, typ string
	// age is how long ago the row was committed, by the database's clock.
	age time.Duration
}

// outbox reads the outbox and the rows its writers deleted themselves
// (outbox_deleted, kept by the outbox's deletion trigger), so that a writer
// that deletes its row in the same transaction is audited too.
func (a *auditor) outbox(ctx context.Context) ([]outboxEvent, error) {
	var deleted bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass('outbox_deleted') IS NOT NULL`).Scan(&deleted); err != nil {
		return nil, fmt.Errorf("looking up outbox_deleted: %w", err)
	}
	rows := `SELECT id, aggregateid, type, created_at FROM outbox`
	if deleted {
		rows += ` UNION ALL SELECT id, aggregateid, type, created_at FROM outbox_deleted`
	}
	res, err := a.pool.Query(ctx, `SELECT id::text, aggregateid, type, extract(epoch FROM now() - created_at)::float8
		FROM (`+rows+`) o ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("reading outbox: %w", err)
	}
	events, err := pgx.CollectRows(res, func(r pgx.CollectableRow) (outboxEvent, error) {
		var e outboxEvent
		var age float64
		err := r.Scan(&e.id, &e.key, &e.typ, &age)
		e.age = time.Duration(age * float64(time.Second))
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading outbox: %w", err)
	}
	return events, nil
}

func (a *auditor) currentWAL(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := a.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("reading current wal position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}

func (a *auditor) slotConfirmed(ctx context.Context) (pglogrepl.LSN, error) {
	st, err := schema.ReadSlotStatus(ctx, a.slots, a.cfg.Slot)
	if err != nil {
		return 0, err
	}
	if st.ConfirmedFlushLSN == "" {
		return 0, nil
	}
	return pglogrepl.ParseLSN(st.ConfirmedFlushLSN)
}

func (a *auditor) marks(ctx context.Context, consumer string) (map[string]bool, error) {
	rows, err := a.pool.Query(ctx, `SELECT event_id::text FROM processed_events WHERE consumer = $1`, consumer)
	if err != nil {
		return nil, fmt.Errorf("reading marks of %s: %w", consumer, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading marks of %s: %w", consumer, err)
	}
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m, nil
}

// dlqRecords reads the DLQ topic; a missing topic is an empty DLQ.
func (a *auditor) dlqRecords(ctx context.Context) ([]kafkaread.Record, error) {
	topic := a.cfg.dlqTopic()
	exists, err := a.kafka.Exists(topic)
	if err != nil || !exists {
		return nil, err
	}
	return a.kafka.ReadAll(ctx, topic)
}

// byConsumer returns, per consumer, the event IDs of the DLQ records.
func byConsumer(dlq []kafkaread.Record) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, r := range dlq {
		c := r.Headers["dlq.consumer"]
		if out[c] == nil {
			out[c] = map[string]bool{}
		}
		out[c][r.Headers[contract.HeaderID]] = true
	}
	return out
}

// purgeRecord is one row of dlq_purged: a dead letter `eventforge dlq purge`
// deleted.
type purgeRecord struct {
	consumer, eventID, orderID, typ string
}

type purgeRecords []purgeRecord

// ids returns the event IDs whose dead letters of consumer were purged.
func (p purgeRecords) ids(consumer string) map[string]bool {
	out := map[string]bool{}
	for _, r := range p {
		if r.consumer == consumer {
			out[r.eventID] = true
		}
	}
	return out
}

// purged reads the purge records of the DLQ topic (none on a schema
// without the table dlq_purged).
func (a *auditor) purged(ctx context.Context) (purgeRecords, error) {
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass('dlq_purged') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		if err != nil {
			return nil, fmt.Errorf("looking for dlq_purged: %w", err)
		}
		return nil, nil
	}
	rows, err := a.pool.Query(ctx, `SELECT consumer, lower(event_id), order_id, event_type FROM dlq_purged WHERE dlq_topic = $1`, a.cfg.dlqTopic())
	if err != nil {
		return nil, fmt.Errorf("reading dlq_purged: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (purgeRecord, error) {
		var p purgeRecord
		err := r.Scan(&p.consumer, &p.eventID, &p.orderID, &p.typ)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading dlq_purged: %w", err)
	}
	return recs, nil
}

// attribution maps event IDs to their order and type, as three parallel
// columns ready to be passed to PostgreSQL as arrays (unnest). Only events
// whose ID and order ID are UUIDs are kept: others cannot match a mark or
// an order.
type attribution struct {
	ids, orders, types []string
}

// attribute collects every event that can still be attributed: from the
// outbox snapshot, the topic, the DLQ, the purge records and the relay's
// dead letters. The first source that holds an event wins.
func attribute(events []outboxEvent, records, dlq []kafkaread.Record, purged purgeRecords, relay relayDeadLetters) attribution {
	var a attribution
	seen := map[uuid.UUID]bool{}
	add := func(id, order, typ string) {
		eid, err := uuid.Parse(id)
		if err != nil || seen[eid] {
			return
		}
		oid, err := uuid.Parse(order)
		if err != nil {
			return
		}
		seen[eid] = true
		a.ids, a.orders, a.types = append(a.ids, eid.String()), append(a.orders, oid.String()), append(a.types, typ)
	}
	for _, e := range events {
		add(e.id, e.key, e.typ)
	}
	for _, rs := range [][]kafkaread.Record{records, dlq} {
		for _, r := range rs {
			add(r.Headers[contract.HeaderID], r.Key, r.Headers[contract.HeaderType])
		}
	}
	for _, p := range purged {
		add(p.eventID, p.orderID, p.typ)
	}
	for id, d := range relay {
		add(id, d.AggregateID, d.Type)
	}
	return a
}

// eventsCTE is the SQL of a common table expression ev(id, order_id, type)
// over an attribution passed as parameters $2, $3 and $4.
const eventsCTE = `ev AS MATERIALIZED (SELECT * FROM unnest($2::text[]::uuid[], $3::text[]::uuid[], $4::text[]) AS e(id, order_id, type))`

// args returns the attribution as the parameters eventsCTE reads.
func (a attribution) args() []any {
	return []any{a.ids, a.orders, a.types}
}

// dlqLowWatermarks returns the low watermark of every partition of the
// DLQ topic (none for a missing topic).
func (a *auditor) dlqLowWatermarks() (map[int32]int64, error) {
	c, err := dlq.NewReader(a.cfg.KafkaBrokers)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	wm, err := dlq.Watermarks(c, a.cfg.dlqTopic())
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	low := make(map[int32]int64, len(wm))
	for p, w := range wm {
		low[p] = w[0]
	}
	return low, nil
}

// checkDeparted counts the dead letters below each DLQ partition's low
// watermark that have no purge record: they left the DLQ without
// `eventforge dlq purge` (expired, or deleted otherwise), so their events
// are lost. Every offset of a DLQ partition held a record (the DLQ
// producer writes no transaction markers and the topic is not compacted).
func (a *auditor) checkDeparted(ctx context.Context, rep *Report, low map[int32]int64) error {
	if len(low) == 0 {
		return nil
	}
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass('dlq_purged') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("looking for dlq_purged: %w", err)
	}
	recorded := map[int32]int64{}
	if exists {
		parts, lows := make([]int32, 0, len(low)), make([]int64, 0, len(low))
		for p, l := range low {
			parts, lows = append(parts, p), append(lows, l)
		}
		rows, err := a.pool.Query(ctx, `SELECT dlq_partition, count(DISTINCT dlq_offset) FROM dlq_purged p
			JOIN unnest($2::int[], $3::bigint[]) AS w(part, low) ON w.part = p.dlq_partition AND p.dlq_offset < w.low
			WHERE dlq_topic = $1 GROUP BY dlq_partition`, a.cfg.dlqTopic(), parts, lows)
		if err != nil {
			return fmt.Errorf("reading dlq_purged: %w", err)
		}
		for rows.Next() {
			var p int32
			var n int64
			if err := rows.Scan(&p, &n); err != nil {
				rows.Close()
				return fmt.Errorf("reading dlq_purged: %w", err)
			}
			recorded[p] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading dlq_purged: %w", err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(low)) {
		if missing := low[p] - recorded[p]; missing > 0 {
			rep.DeadLettersLost += int(missing)
			rep.violate("lost: %d dead letters of %s[%d] below its low watermark %d left the DLQ without a purge record (expired or deleted)",
				missing, a.cfg.dlqTopic(), p, low[p])
		}
	}
	return nil
}
