package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// markSQL inserts the (consumer, event_id) marks of a transaction in one
// statement and says, per event ID, whether the mark is new (true) or
// already existed when the statement started (false). An ID in neither set
// was marked by a concurrent transaction that committed while this insert
// waited for it: an idempotency conflict, which is a duplicate too.
//
// Each mark keeps the partition ($3) and the offset ($4) of the newest copy
// of its event the consumer read: an existing mark is moved to a later copy
// (prune.go deletes a mark only once every copy is below the partition's
// log start). Existing marks are locked, and new ones inserted, in event ID
// order, so concurrent batches with overlapping IDs take them in the same
// order and cannot deadlock on them.
const markSQL = `WITH ids AS (
	SELECT DISTINCT ON (event_id) event_id, part, off
	FROM unnest($2::uuid[], $3::int[], $4::bigint[]) AS u(event_id, part, off)
	ORDER BY event_id, off DESC
), locked AS (
	SELECT p.event_id FROM processed_events p JOIN ids USING (event_id)
	WHERE p.consumer = $1 ORDER BY p.event_id FOR UPDATE OF p
), existing AS (
	UPDATE processed_events p SET kafka_partition = ids.part, kafka_offset = ids.off
	FROM ids WHERE p.consumer = $1 AND p.event_id = ids.event_id AND p.event_id IN (SELECT event_id FROM locked)
		AND p.kafka_offset IS DISTINCT FROM greatest(p.kafka_offset, ids.off)
	RETURNING p.event_id
), ins AS (
	INSERT INTO processed_events (consumer, event_id, kafka_partition, kafka_offset)
	SELECT $1, event_id, part, off FROM ids WHERE event_id NOT IN (SELECT event_id FROM locked)
	ORDER BY event_id
	ON CONFLICT DO NOTHING
	RETURNING event_id
)
SELECT event_id, true FROM ins
UNION ALL
SELECT event_id, false FROM locked`

// markArgs are markSQL's arguments for evs of consumer name.
func markArgs(name string, ids []uuid.UUID, evs []Event) []any {
	parts := make([]int32, len(evs))
	offs := make([]int64, len(evs))
	for i, ev := range evs {
		parts[i], offs[i] = ev.Partition, ev.Offset
	}
	return []any{name, markIDs(ids), parts, offs}
}

// outcome is what one transaction did with its events.
type outcome struct {
	applied    int // events whose mark was new: the handler applied them
	duplicates int // events whose mark existed (or appeared concurrently)
	conflicts  int // of duplicates: marked by a concurrent transaction
}

// markIDs hands event IDs to pgx as its native UUID type, which it writes
// in binary: a uuid.UUID would go through driver.Valuer, its text form and
// reflection over the slice for every event.
func markIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
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
	start := time.Now()
	fast, err := r.applyPipelined(ctx, ids, evs)
	if err != nil {
		return outcome{}, err
	}
	if fast.committed {
		applySeconds.WithLabelValues(r.opts.Name).Observe(time.Since(start).Seconds())
		if err := failpoint.Eval(ctx, failpoint.ConsumerAfterDBCommitBeforeOffset); err != nil {
			return outcome{}, err // as below: the retry finds the marks
		}
		return outcome{applied: len(evs)}, nil
	}
	out, err := r.applyGeneral(ctx, ids, evs)
	if err != nil {
		return outcome{}, err
	}
	// Marks a concurrent transaction committed while the pipelined path's
	// marks waited are existing marks by now; they were conflicts.
	out.conflicts = min(out.conflicts+fast.conflicts, out.duplicates)
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

// applyGeneral is apply's general path, for any handler and any events:
// BEGIN; the marks (markSQL), which tell new events from duplicates and
// conflicts; the handler for every new event; COMMIT.
func (r *Runtime) applyGeneral(ctx context.Context, ids []uuid.UUID, evs []Event) (outcome, error) {
	var out outcome
	tx, err := r.db.Begin(ctx)
	if err != nil {
		// Nothing of the events was tried: no connection, or no answer.
		return outcome{}, fmt.Errorf("%w: beginning a transaction: %w", ErrUnavailable, err)
	}
	err = func() error {
		defer func() { _ = tx.Rollback(ctx) }() // no-op after COMMIT
		rows, err := tx.Query(ctx, markSQL, markArgs(r.opts.Name, ids, evs)...)
		if err != nil {
			return fmt.Errorf("marking %d events: %w", len(ids), err)
		}
		fresh := make(map[uuid.UUID]bool, len(ids))
		existed := make(map[uuid.UUID]bool)
		for rows.Next() {
			var id pgtype.UUID
			var isNew bool
			if err := rows.Scan(&id, &isNew); err != nil {
				rows.Close()
				return fmt.Errorf("reading marks: %w", err)
			}
			if isNew {
				fresh[id.Bytes] = true
			} else {
				existed[id.Bytes] = true
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
			delete(fresh, ev.ID)  // a second delivery within the batch is a duplicate,
			existed[ev.ID] = true // and a plain one, not a conflict
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
	return out, err
}

// connAcquirer is a DB that lends one of its connections (PoolDB).
type connAcquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// pipelined is what applyPipelined did.
type pipelined struct {
	committed bool // every event was new and the transaction committed
	conflicts int  // when not committed: events a concurrent transaction marked while the marks waited
}

// applyPipelined is apply's two-round-trip path for the common case, no
// event of evs marked yet, instead of the general path's four (BEGIN, the
// marks, the handler's statements, COMMIT). The first round trip is one
// pipeline: BEGIN, the marks (markSQL) and the handler's statements for
// every event, whose checks then run on their results; the second is the
// COMMIT, sent only when every mark was new and every statement and check
// passed, with consumer.before_db_commit evaluated just before it as on the
// general path. Until that COMMIT the transaction is open, as on the general
// path, so the handler's statements for an event marked before are rolled
// back, never committed.
//
// When a mark existed (an event applied before) it rolls back and reports
// not committed, with the events a concurrent transaction marked while the
// marks waited (conflicts, which a second try cannot see as such), and
// apply runs the events the general way. So it does, with no conflicts,
// when no connection could be had or a handler's Queue refused an event,
// for the general path to report. Any other failure (a statement, a check,
// a lost connection, a failpoint, the COMMIT) rolls back and is returned as
// the general path returns it. It needs a Batcher handler, a DB that lends
// connections and events with distinct IDs; otherwise it reports not
// committed at once.
func (r *Runtime) applyPipelined(ctx context.Context, ids []uuid.UUID, evs []Event) (pipelined, error) {
	batcher, ok := r.handler.(Batcher)
	if !ok {
		return pipelined{}, nil
	}
	db, ok := r.db.(connAcquirer)
	if !ok {
		return pipelined{}, nil
	}
	seen := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return pipelined{}, nil // delivered twice in one batch
		}
		seen[id] = true
	}
	var fresh, existed int
	marked := false
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(markSQL, markArgs(r.opts.Name, ids, evs)...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id pgtype.UUID
			var isNew bool
			if err := rows.Scan(&id, &isNew); err != nil {
				return fmt.Errorf("reading marks: %w", err)
			}
			if isNew {
				fresh++
			} else {
				existed++
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("marking %d events: %w", len(ids), err)
		}
		marked = true
		return nil
	})
	for _, ev := range evs {
		if err := batcher.Queue(b, ev); err != nil {
			return pipelined{}, nil // the general path reports it, for its event
		}
	}
	c, err := db.Acquire(ctx)
	if err != nil {
		return pipelined{}, nil
	}
	// A connection released inside a transaction (a rollback that failed)
	// is closed by the pool, never reused.
	defer c.Release()
	err = c.SendBatch(ctx, b).Close()
	if err == nil && fresh == len(ids) {
		err = failpoint.Eval(ctx, failpoint.ConsumerBeforeDBCommit)
		if err == nil {
			tag, err := c.Exec(ctx, "COMMIT")
			if err == nil && tag.String() != "COMMIT" {
				err = pgx.ErrTxCommitRollback // the transaction had failed: COMMIT rolled it back
			}
			if err != nil {
				return pipelined{}, fmt.Errorf("committing: %w", err)
			}
			return pipelined{committed: true}, nil
		}
		_, _ = c.Exec(ctx, "ROLLBACK")
		return pipelined{}, err
	}
	_, _ = c.Exec(ctx, "ROLLBACK")
	if marked && fresh < len(ids) {
		// Statements of events marked before may have failed too: the
		// general path runs none of them.
		return pipelined{conflicts: len(ids) - fresh - existed}, nil
	}
	return pipelined{}, fmt.Errorf("applying %d events from %s[%d]@%d: %w", len(evs), evs[0].Topic, evs[0].Partition, evs[0].Offset, err)
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
