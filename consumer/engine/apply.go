package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// markSQL inserts the (consumer, event_id) marks of a transaction in one
// statement and says, per event ID, whether the mark is new (true) or
// already existed when the statement started (false). An ID in neither set
// was marked by a concurrent transaction that committed while this insert
// waited for it: an idempotency conflict, which is a duplicate too.
//
// Marks are inserted in event ID order, so concurrent batches with
// overlapping IDs lock them in the same order and cannot deadlock on them.
const markSQL = `WITH ids AS (
	SELECT DISTINCT unnest($2::uuid[]) AS event_id
), existing AS (
	SELECT p.event_id FROM processed_events p JOIN ids USING (event_id) WHERE p.consumer = $1
), ins AS (
	INSERT INTO processed_events (consumer, event_id)
	SELECT $1, event_id FROM ids WHERE event_id NOT IN (SELECT event_id FROM existing)
	ORDER BY event_id
	ON CONFLICT DO NOTHING
	RETURNING event_id
)
SELECT event_id, true FROM ins
UNION ALL
SELECT event_id, false FROM existing`

// outcome is what one transaction did with its events.
type outcome struct {
	applied    int // events whose mark was new: the handler applied them
	duplicates int // events whose mark existed (or appeared concurrently)
	conflicts  int // of duplicates: marked by a concurrent transaction
}

// apply runs one transaction over evs, in order: the marks, then the
// handler for every event whose mark is new (once per event ID, so an event
// delivered twice within one batch is applied once). Any error rolls back
// everything: no mark without its effect. The failpoints
// consumer.before_db_commit and consumer.after_db_commit_before_offset
// fire around the COMMIT of a transaction that applied something.
func (r *Runtime) apply(ctx context.Context, evs []Event) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.AttemptTimeout)
	defer cancel()
	ids := make([]uuid.UUID, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	var out outcome
	start := time.Now()
	tx, err := r.db.Begin(ctx)
	if err != nil {
		// Nothing of the events was tried: no connection, or no answer.
		return outcome{}, fmt.Errorf("%w: beginning a transaction: %w", ErrUnavailable, err)
	}
	err = func() error {
		defer func() { _ = tx.Rollback(ctx) }() // no-op after COMMIT
		rows, err := tx.Query(ctx, markSQL, r.opts.Name, ids)
		if err != nil {
			return fmt.Errorf("marking %d events: %w", len(ids), err)
		}
		fresh := make(map[uuid.UUID]bool, len(ids))
		existed := make(map[uuid.UUID]bool)
		for rows.Next() {
			var id uuid.UUID
			var isNew bool
			if err := rows.Scan(&id, &isNew); err != nil {
				rows.Close()
				return fmt.Errorf("reading marks: %w", err)
			}
			if isNew {
				fresh[id] = true
			} else {
				existed[id] = true
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("marking %d events: %w", len(ids), err)
		}
		toApply := make([]Event, 0, len(fresh))
		for _, ev := range evs {
			if !fresh[ev.ID] {
				out.duplicates++
				if !existed[ev.ID] {
					out.conflicts++
					existed[ev.ID] = true // a repeat within the batch is a plain duplicate
				}
				continue
			}
			delete(fresh, ev.ID) // a second delivery within the batch is a duplicate
			toApply = append(toApply, ev)
		}
		if len(toApply) > 0 {
			if err := r.applyAll(ctx, tx, toApply); err != nil {
				return err
			}
			out.applied = len(toApply)
			if err := failpoint.Eval(ctx, failpoint.ConsumerBeforeDBCommit); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("committing: %w", err)
		}
		return nil
	}()
	if err != nil {
		return outcome{}, err
	}
	applySeconds.WithLabelValues(r.opts.Name).Observe(time.Since(start).Seconds())
	if out.applied > 0 {
		if err := failpoint.Eval(ctx, failpoint.ConsumerAfterDBCommitBeforeOffset); err != nil {
			// Committed but reported as failed: the retry finds the marks and
			// counts the events as duplicates, which is what a crash here does.
			return outcome{}, err
		}
	}
	return out, nil
}

// ApplyBatch applies evs in one transaction exactly as Run applies a batch
// of one partition's records, failpoints included: the marks, then the
// handler for every event whose mark is new, then COMMIT. It reports how
// many events the handler applied and how many were duplicates. It is for
// callers that hold events without Kafka, such as the handler contract
// suite (package consumertest); a failure is returned, never retried or
// dead-lettered.
func (r *Runtime) ApplyBatch(ctx context.Context, evs []Event) (applied, duplicates int, err error) {
	out, err := r.apply(ctx, evs)
	return out.applied, out.duplicates, err
}

// applyAll runs the handler for evs, in order, in tx. A Batcher's
// statements for all of them go out in one pipeline: one round trip
// instead of one or more per event.
func (r *Runtime) applyAll(ctx context.Context, tx pgx.Tx, evs []Event) error {
	batcher, ok := r.handler.(Batcher)
	if !ok || len(evs) == 1 {
		for _, ev := range evs {
			if err := r.handler.Apply(ctx, tx, ev); err != nil {
				return fmt.Errorf("applying event %s (%s) at %s[%d]@%d: %w", ev.ID, ev.Type, ev.Topic, ev.Partition, ev.Offset, err)
			}
		}
		return nil
	}
	b := &pgx.Batch{}
	for _, ev := range evs {
		if err := batcher.Queue(b, ev); err != nil {
			return fmt.Errorf("applying event %s (%s) at %s[%d]@%d: %w", ev.ID, ev.Type, ev.Topic, ev.Partition, ev.Offset, err)
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("applying %d events from %s[%d]@%d: %w", len(evs), evs[0].Topic, evs[0].Partition, evs[0].Offset, err)
	}
	return nil
}

// toEvent reads the envelope of a record. A record without a valid event ID
// is malformed: it cannot be deduplicated, so it is never applied.
func toEvent(m *kafka.Message) (Event, error) {
	ev := Event{
		Key:       string(m.Key),
		Payload:   m.Value,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Headers:   m.Headers,
	}
	if m.TopicPartition.Topic != nil {
		ev.Topic = *m.TopicPartition.Topic
	}
	var rawID string
	for _, h := range m.Headers {
		switch h.Key {
		case contract.HeaderID:
			rawID = string(h.Value)
		case contract.HeaderType:
			ev.Type = string(h.Value)
		}
	}
	id, err := uuid.Parse(rawID)
	if err != nil {
		return ev, fmt.Errorf("%w: header id %q is not a UUID", ErrMalformed, rawID)
	}
	ev.ID = id
	return ev, nil
}
