package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/kafkaread"
)

type auditor struct {
	cfg   Config
	pool  *pgxpool.Pool
	kafka *kafkaread.Reader
}

func newAuditor(ctx context.Context, cfg Config) (*auditor, error) {
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	kr, err := kafkaread.New(cfg.KafkaBrokers)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &auditor{cfg: cfg, pool: pool, kafka: kr}, nil
}

func (a *auditor) close() {
	a.kafka.Close()
	a.pool.Close()
}

// outboxEvent is one row of the outbox snapshot, in commit order.
type outboxEvent struct {
	id, key, typ string
}

func (a *auditor) run(ctx context.Context) (*Report, error) {
	rep := &Report{
		BusinessChanges: map[string]int{},
		Pending:         map[string]int{},
		DeadLettered:    map[string]int{},
		Drained:         true,
	}

	// 1. The outbox snapshot, then the WAL position after it: every row of
	// the snapshot committed before that position.
	events, err := a.outbox(ctx)
	if err != nil {
		return nil, err
	}
	rep.LogicalEvents = len(events)
	walAfter, err := a.currentWAL(ctx)
	if err != nil {
		return nil, err
	}
	if a.cfg.Wait > 0 {
		rep.Drained = a.waitDrained(ctx, walAfter)
	}
	confirmed, err := a.slotConfirmed(ctx)
	if err != nil {
		return nil, err
	}
	if now, err := a.currentWAL(ctx); err == nil && now > confirmed {
		rep.SlotLagBytes = int64(now - confirmed)
	}
	slotPassed := confirmed >= walAfter

	// 2. Committed offsets before marks: an offset is committed only after
	// the marks of the records before it, so marks read afterwards cover it.
	committed := map[string]map[int32]int64{}
	for name, group := range a.cfg.Consumers {
		c, err := a.kafka.Committed(group, a.cfg.Topic)
		if err != nil {
			return nil, err
		}
		committed[name] = c
	}

	// 3. Kafka as stored: the topic and the DLQ.
	records, err := a.kafka.ReadAll(ctx, a.cfg.Topic)
	if err != nil {
		return nil, err
	}
	dead, err := a.deadLettered(ctx)
	if err != nil {
		return nil, err
	}

	// 4. Deliveries, publication and ordering.
	a.checkDeliveries(rep, events, records, slotPassed)

	// 5. Each consumer: skipped records and business effects.
	for name := range a.cfg.Consumers {
		marks, err := a.marks(ctx, name)
		if err != nil {
			return nil, err
		}
		checkConsumer(rep, name, records, committed[name], marks, dead[name])
		eff, err := effectChecks[name](ctx, a.pool, name)
		if err != nil {
			return nil, fmt.Errorf("checking effects of %s: %w", name, err)
		}
		rep.BusinessChanges[name] = eff.changes
		rep.DuplicateEffects += eff.duplicates
		rep.MarksWithoutEffect += eff.marksWithoutEffect
		rep.EffectsWithoutMark += eff.effectsWithoutMark
		for _, d := range eff.details {
			rep.violate("%s: %s", name, d)
		}
	}
	return rep, nil
}

func (a *auditor) outbox(ctx context.Context) ([]outboxEvent, error) {
	rows, err := a.pool.Query(ctx, `SELECT id::text, aggregateid, type FROM outbox ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("reading outbox: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxEvent, error) {
		var e outboxEvent
		err := r.Scan(&e.id, &e.key, &e.typ)
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
	var s *string
	err := a.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, a.cfg.Slot).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("reading slot %s: %w", a.cfg.Slot, err)
	}
	if s == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*s)
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

// deadLettered returns, per consumer, the event IDs found in the DLQ.
func (a *auditor) deadLettered(ctx context.Context) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	topic := a.cfg.dlqTopic()
	exists, err := a.kafka.Exists(topic)
	if err != nil || !exists {
		return out, err
	}
	recs, err := a.kafka.ReadAll(ctx, topic)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		c := r.Headers["dlq.consumer"]
		if out[c] == nil {
			out[c] = map[string]bool{}
		}
		out[c][r.Headers["id"]] = true
	}
	return out, nil
}

// waitDrained waits until the slot confirmed walAfter and every group
// committed up to the end of the topic, or cfg.Wait passes.
func (a *auditor) waitDrained(ctx context.Context, walAfter pglogrepl.LSN) bool {
	deadline := time.Now().Add(a.cfg.Wait)
	for {
		if a.drained(ctx, walAfter) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (a *auditor) drained(ctx context.Context, walAfter pglogrepl.LSN) bool {
	confirmed, err := a.slotConfirmed(ctx)
	if err != nil || confirmed < walAfter {
		return false
	}
	ends, err := a.kafka.EndOffsets(a.cfg.Topic)
	if err != nil {
		return false
	}
	for _, group := range a.cfg.Consumers {
		committed, err := a.kafka.Committed(group, a.cfg.Topic)
		if err != nil {
			return false
		}
		for p, end := range ends {
			if end > 0 && committed[p] < end {
				return false
			}
		}
	}
	return true
}

// checkDeliveries counts deliveries and duplicates, finds outbox events
// missing from Kafka, and checks per-order partitioning and order.
func (a *auditor) checkDeliveries(rep *Report, events []outboxEvent, records []kafkaread.Record, slotPassed bool) {
	rep.Deliveries = len(records)
	seen := map[string]int{}
	// first occurrence of each event in Kafka, per partition order
	type pos struct {
		partition int32
		offset    int64
	}
	first := map[string]pos{}
	partitionsOfKey := map[string]map[int32]bool{}
	for _, r := range records {
		id := r.Headers["id"]
		seen[id]++
		if _, ok := first[id]; !ok {
			first[id] = pos{r.Partition, r.Offset}
		}
		if partitionsOfKey[r.Key] == nil {
			partitionsOfKey[r.Key] = map[int32]bool{}
		}
		partitionsOfKey[r.Key][r.Partition] = true
	}
	rep.DuplicateDeliveries = len(records) - len(seen)

	lastOfKey := map[string]pos{}
	lastIDOfKey := map[string]string{}
	for _, e := range events {
		p, published := first[e.id]
		if !published {
			if slotPassed {
				rep.Lost++
				rep.violate("lost: outbox event %s (%s of order %s) is not in %s although the slot confirmed past it", e.id, e.typ, e.key, a.cfg.Topic)
			} else {
				rep.Unpublished++
			}
			continue
		}
		if prev, ok := lastOfKey[e.key]; ok && prev.partition == p.partition && p.offset < prev.offset {
			rep.OrderingViolations++
			rep.violate("ordering: event %s of order %s is at offset %d, before the earlier-committed event %s at offset %d", e.id, e.key, p.offset, lastIDOfKey[e.key], prev.offset)
		}
		lastOfKey[e.key], lastIDOfKey[e.key] = p, e.id
	}
	for key, parts := range partitionsOfKey {
		if len(parts) > 1 {
			rep.OrderingViolations++
			rep.violate("ordering: events of order %s are spread over %d partitions", key, len(parts))
		}
	}
}

// checkConsumer finds records the consumer's committed offset passed without
// a mark (lost) and counts those it has not reached yet (pending).
func checkConsumer(rep *Report, name string, records []kafkaread.Record, committed map[int32]int64, marks, dead map[string]bool) {
	rep.DeadLettered[name] = len(dead)
	pending := map[string]bool{}
	for _, r := range records {
		id := r.Headers["id"]
		if marks[id] || dead[id] {
			continue
		}
		if r.Offset < committed[r.Partition] {
			rep.Lost++
			rep.violate("lost: consumer %s committed offset %d of partition %d past event %s (offset %d) without applying it", name, committed[r.Partition], r.Partition, id, r.Offset)
			continue
		}
		pending[id] = true
	}
	rep.Pending[name] = len(pending)
}
