package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Bounded marks.
//
// A mark (consumer, event_id) keeps its event from being applied twice; it
// may go only when its event can no longer be delivered to the consumer
// again. An event comes back from four places, and the rule closes each:
//
//  1. Kafka itself (a rewind, a group reset to the earliest offset): the
//     mark keeps the partition and offset of the newest copy of its event
//     the consumer read (markSQL moves it to each later copy), and goes
//     only once that offset is below the partition's log-start offset —
//     every copy is gone from Kafka. Copies are keyed by order, so all of
//     them are in one partition.
//  2. The relay publishing it again (a restart, a takeover, a gap
//     recovery, `eventforge outbox replay`): these come from the WAL and
//     from the outbox rows, so the mark goes only once the event's outbox
//     row is pruned (neither in the outbox nor among the rows writers
//     deleted); the relay prunes a row only after its slot confirmed past
//     it, so the stream no longer holds it either.
//  3. The relay's dead-letter replay: the mark goes only while the event is
//     not in the relay's dead-letter table.
//  4. A DLQ replay (of any consumer: a replay republishes to the source
//     topic every consumer reads): no mark goes while the source topic's
//     DLQ holds a record.
//
// Marks written before the positions were kept have none and stay. The
// probe's marks stand for no event and go after an hour.

// pruneSQL deletes up to $4 marks of consumer $1 whose newest copy is below
// the log start $3 of its partition $2, whose outbox row is gone and which
// the relay did not dead-letter. Each partition is read in offset order on
// processed_events_position and only below its log start, so a round costs
// the marks it looks at, not the table: a plain join let the planner scan
// every mark of the consumer to find the last few (1.9 s on 500,000 marks
// for a round's final, empty statement; 0.3 ms this way).
const pruneSQL = `WITH starts AS (
	SELECT * FROM unnest($2::int[], $3::bigint[]) AS s(part, log_start)
), victims AS (
	SELECT v.event_id FROM starts s CROSS JOIN LATERAL (
		SELECT p.event_id FROM processed_events p
		WHERE p.consumer = $1 AND p.kafka_partition = s.part AND p.kafka_offset < s.log_start
			AND NOT EXISTS (SELECT FROM outbox o WHERE o.id = p.event_id)
			AND NOT EXISTS (SELECT FROM outbox_deleted d WHERE d.id = p.event_id)
			AND NOT EXISTS (SELECT FROM cdc_dead_letters c WHERE c.event_id = p.event_id::text)
		ORDER BY p.kafka_offset
		LIMIT $4
	) v
	LIMIT $4
)
DELETE FROM processed_events p USING victims v WHERE p.consumer = $1 AND p.event_id = v.event_id`

// pruneProbeSQL deletes the probe's marks older than an hour.
const pruneProbeSQL = `DELETE FROM processed_events WHERE consumer = $1 AND processed_at < now() - interval '1 hour'`

// pruneMarks deletes, every MarksPruneInterval until ctx ends, the marks
// the rule above lets go, MarksPruneBatch per statement.
func (r *Runtime) pruneMarks(ctx context.Context, logs chan kafka.LogEvent) {
	if r.opts.MarksPruneInterval <= 0 {
		return
	}
	// Exported from the start, so that a scrape shows pruning is on.
	marksPruned.WithLabelValues(r.opts.Name).Add(0)
	marksPrunePaused.WithLabelValues(r.opts.Name).Set(0)
	if len(r.opts.Topics) != 1 {
		r.logger.Info("marks are not pruned: a mark keeps its partition, not its topic, so pruning needs one source topic", "topics", r.opts.Topics)
		return
	}
	cfg := kafkaconf.Base(r.opts.Bootstrap, "eventforge-"+r.opts.Name+"-prune", logs)
	cfg["group.id"] = "eventforge-marks-prune" // required by librdkafka; never joined
	cfg["enable.auto.commit"] = false
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		r.logger.Warn("creating the marks pruner's reader", "err", err)
		return
	}
	defer c.Close()
	r.countMarks(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.opts.MarksPruneInterval):
		}
		n, err := r.pruneOnce(ctx, c)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.Warn("pruning marks", "err", err)
		case n > 0:
			marksPruned.WithLabelValues(r.opts.Name).Add(float64(n))
			r.logger.Info("marks pruned", "marks", n)
		}
		r.countMarks(ctx)
	}
}

// countMarks sets eventforge_consumer_marks_held to the marks the consumer
// holds: one index-only count, once per pruning round.
func (r *Runtime) countMarks(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, r.opts.AttemptTimeout)
	defer cancel()
	tx, err := r.db.Begin(ctx)
	if err == nil {
		defer func() { _ = tx.Rollback(ctx) }()
		var n int64
		if err = tx.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = $1`, r.opts.Name).Scan(&n); err == nil {
			marksHeld.WithLabelValues(r.opts.Name).Set(float64(n))
			return
		}
	}
	if parent.Err() == nil {
		r.logger.Warn("counting marks", "err", err)
	}
}

// pruneOnce runs one round and returns how many marks it deleted.
func (r *Runtime) pruneOnce(ctx context.Context, c *kafka.Consumer) (int64, error) {
	src := r.opts.Topics[0]
	held, err := dlq.ReadStats(ctx, c, dlq.Topic(src, r.opts.DLQSuffix))
	if err != nil {
		return 0, fmt.Errorf("reading the DLQ of %s: %w", src, err)
	}
	if held.Count > 0 {
		marksPrunePaused.WithLabelValues(r.opts.Name).Set(1)
		r.logger.Debug("marks are not pruned while the DLQ holds records: a replay would deliver them again", "dlq_records", held.Count)
		return 0, nil
	}
	marksPrunePaused.WithLabelValues(r.opts.Name).Set(0)
	wm, err := dlq.Watermarks(c, src)
	if err != nil {
		return 0, err
	}
	parts, starts := make([]int32, 0, len(wm)), make([]int64, 0, len(wm))
	for p, w := range wm {
		parts, starts = append(parts, p), append(starts, w[0])
	}
	var total int64
	for ctx.Err() == nil {
		n, err := r.execPrune(ctx, pruneSQL, r.opts.Name, parts, starts, r.opts.MarksPruneBatch)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(r.opts.MarksPruneBatch) {
			break
		}
	}
	_, err = r.execPrune(ctx, pruneProbeSQL, r.opts.Name+ProbeSuffix)
	return total, err
}

// execPrune runs one pruning statement in a transaction of its own.
func (r *Runtime) execPrune(ctx context.Context, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.AttemptTimeout)
	defer cancel()
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
