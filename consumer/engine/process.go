package engine

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/tracing"
)

// work applies p's records until p stops. A stopped partition starts no
// new batch: take returns nil, and attempt begins no transaction. A panic
// outside an attempt (attempt recovers its own) is a fault of the runtime:
// it ends Run with an error, so that the next process redelivers what was
// not finished, instead of skipping the record.
func (r *Runtime) work(p *partition) {
	defer close(p.done)
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("worker of %s[%d] panicked: %v", p.topic, p.id, v)
			r.logger.Error("worker panicked", "topic", p.topic, "partition", p.id, "panic", v, "stack", string(debug.Stack()))
			r.workerErr.CompareAndSwap(nil, &err)
		}
	}()
	for {
		batch := p.take(r.opts.BatchSize, r.opts.BatchWait)
		if batch == nil || !r.process(p, batch) {
			return
		}
	}
}

// process finishes batch (records of p in offset order) and stores the
// offset after each finished record. It reports false when p stopped before
// the batch was finished; the unfinished records are redelivered to the
// partition's next owner.
func (r *Runtime) process(p *partition, batch []*kafka.Message) bool {
	defer tracing.StartProcessBatch(p.ctx, r.opts.Name, batch)(nil) // one span per record, child of its traceparent
	if len(batch) > 1 {
		done, err := r.processBatch(p, batch)
		if done {
			return true
		}
		if errors.Is(err, errStopped) {
			return false
		}
		r.logger.Warn("batch not applied; applying its records one by one", "topic", p.topic, "partition", p.id,
			"first_offset", batch[0].TopicPartition.Offset, "records", len(batch), "err", err)
	}
	for _, m := range batch {
		if !r.processOne(p, m) {
			return false
		}
		r.store(p, m)
	}
	return true
}

// processBatch tries batch in one transaction, once.
func (r *Runtime) processBatch(p *partition, batch []*kafka.Message) (bool, error) {
	evs := make([]Event, len(batch))
	for i, m := range batch {
		ev, err := toEvent(m)
		if err != nil {
			return false, err
		}
		evs[i] = ev
	}
	out, err := r.attempt(p, evs)
	if err != nil {
		return false, err
	}
	r.count(ResultApplied, out.applied)
	r.count(ResultDuplicate, out.duplicates)
	conflictsTotal.WithLabelValues(r.opts.Name).Add(float64(out.conflicts))
	r.store(p, batch[len(batch)-1])
	r.logger.Debug("batch applied", "topic", p.topic, "partition", p.id, "first_offset", batch[0].TopicPartition.Offset,
		"records", len(batch), "applied", out.applied, "duplicates", out.duplicates)
	return true, nil
}

// processOne applies m, retrying inline with backoff while its partition is
// paused, until it is applied, found to be a duplicate, or dead-lettered.
// Attempts that found the database unavailable are retried without limit
// and do not count towards Options.MaxAttempts. It reports false when p
// stopped first.
func (r *Runtime) processOne(p *partition, m *kafka.Message) bool {
	defer p.retrying.Store(false)
	defer r.setUnavailable(p, false)
	if p.ctx.Err() != nil {
		return false
	}
	ev, envelopeErr := toEvent(m)
	var first, last, waitingSince time.Time
	counted := 0 // failed attempts that count towards MaxAttempts
	for attempt := 1; ; attempt++ {
		err := envelopeErr
		if err == nil {
			var out outcome
			out, err = r.attempt(p, []Event{ev})
			if errors.Is(err, errStopped) {
				return false
			}
			if err == nil {
				switch {
				case out.duplicates > 0:
					r.count(ResultDuplicate, 1)
					conflictsTotal.WithLabelValues(r.opts.Name).Add(float64(out.conflicts))
				case attempt > 1:
					r.count(ResultRetried, 1)
				default:
					r.count(ResultApplied, 1)
				}
				if !waitingSince.IsZero() {
					r.logger.Info("database answers again; partition resumes", "topic", ev.Topic, "partition", ev.Partition,
						"offset", ev.Offset, "waited", time.Since(waitingSince).Round(time.Millisecond))
				}
				r.logger.Debug("event handled", "event_id", ev.ID, "type", ev.Type, "order_id", ev.Key, "topic", ev.Topic,
					"partition", ev.Partition, "offset", ev.Offset, "duplicate", out.duplicates > 0, "attempt", attempt)
				return true
			}
		}
		class, err := r.classify(p.ctx, err)
		now := time.Now()
		if class != ClassUnavailable {
			counted++
			if first.IsZero() {
				first = now
			}
			last = now
		}
		if !retryable(class, counted, r.opts.MaxAttempts, last.Sub(first), r.opts.NotFoundGrace) {
			return r.deadLetter(p, m, ev.ID.String(), dlq.Failure{
				Consumer: r.opts.Name, Class: string(class), Message: err.Error(),
				Attempts: counted, FirstFailedAt: first, LastFailedAt: last,
			})
		}
		if p.ctx.Err() != nil {
			return false
		}
		p.retrying.Store(true)
		retriesTotal.WithLabelValues(r.opts.Name).Inc()
		wait := backoff(attempt, r.opts.InitialBackoff, r.opts.MaxBackoff)
		if class == ClassNotFound && counted == 1 {
			wait = min(wait, notFoundFirstWait)
		}
		switch {
		case class != ClassUnavailable:
			r.setUnavailable(p, false)
			r.logger.Warn("event not applied; retrying", "err", err, "class", string(class), "event_id", ev.ID, "order_id", ev.Key,
				"topic", ev.Topic, "partition", ev.Partition, "offset", ev.Offset, "attempt", counted, "backoff", wait)
		case !p.unavailable:
			waitingSince = now
			r.setUnavailable(p, true)
			r.logger.Warn("database unavailable; partition waits", "err", err, "event_id", ev.ID, "order_id", ev.Key,
				"topic", ev.Topic, "partition", ev.Partition, "offset", ev.Offset)
		default:
			r.logger.Debug("database still unavailable", "err", err, "topic", ev.Topic, "partition", ev.Partition,
				"offset", ev.Offset, "backoff", wait)
		}
		if !p.sleep(wait) {
			return false
		}
	}
}

// notFoundFirstWait is the wait before the second attempt at an event whose
// subject was not found. The usual cause is a transaction that logical
// decoding handed to the relay a moment before it became visible to other
// sessions (see ErrNotFound): under load, up to a few milliseconds. The
// partition waits behind the event, so the first retry comes that soon;
// later ones back off as usual.
const notFoundFirstWait = 5 * time.Millisecond

// deadLetter writes m's DLQ record and waits for the DLQ's acknowledgement,
// retrying the write until it succeeds or p stops. Only then may the source
// offset be stored: a crash in between leaves the source record to be
// redelivered and dead-lettered again (a duplicate DLQ record, never a lost
// one). While a write fails the partition waits without a limit, counted in
// eventforge_consumer_dlq_unavailable_partitions with the cause
// (dlqWriteCause); a copy the DLQ topic refuses as too large is written
// again at once with its failure message capped (dlq.Failure.Capped).
func (r *Runtime) deadLetter(p *partition, m *kafka.Message, eventID string, f dlq.Failure) bool {
	defer r.setDLQUnavailable(p, "")
	topic := dlq.Topic(p.topic, r.opts.DLQSuffix)
	rec := dlq.Record(m, topic, f)
	capped := false
	for attempt := 1; ; attempt++ {
		if p.ctx.Err() != nil {
			return false // revoked before this write: the next owner decides
		}
		err := r.dlq.Write(rec)
		if err == nil {
			break
		}
		if p.ctx.Err() != nil || r.dlq.Fatal() != nil {
			// A fatal producer error ends Run; the record is redelivered
			// to the next process.
			return false
		}
		cause := dlqWriteCause(err)
		if cause == CauseTooLarge && !capped {
			capped = true
			rec = dlq.Record(m, topic, f.Capped())
			r.logger.Warn("dead-letter record too large; writing it with a capped failure message", "err", err, "dlq_topic", topic,
				"event_id", eventID, "partition", p.id, "offset", m.TopicPartition.Offset)
			continue
		}
		r.setDLQUnavailable(p, cause)
		wait := backoff(attempt, r.opts.InitialBackoff, r.opts.MaxBackoff)
		r.logger.Error("writing dead-letter record; partition waits", "err", err, "cause", cause, "dlq_topic", topic, "event_id", eventID,
			"partition", p.id, "offset", m.TopicPartition.Offset, "backoff", wait)
		if !p.sleep(wait) {
			return false
		}
	}
	r.count(ResultDeadLettered, 1)
	r.logger.Error("event dead-lettered", "event_id", eventID, "order_id", string(m.Key), "topic", p.topic, "partition", p.id,
		"offset", m.TopicPartition.Offset, "dlq_topic", topic, "class", f.Class, "attempts", f.Attempts, "err", f.Message)
	if err := failpoint.Eval(p.ctx, failpoint.ConsumerAfterDLQAckBeforeOffset); err != nil {
		return false
	}
	return true
}

// store records that every record of p up to m is finished; the offset is
// committed with the next commit. Only the worker of a partition stores its
// offsets, and revocation waits for that worker, so no offset is stored for
// a partition this member no longer owns.
func (r *Runtime) store(p *partition, m *kafka.Message) {
	next := int64(m.TopicPartition.Offset) + 1
	tp := p.tp()
	tp.Offset = kafka.Offset(next)
	if _, err := r.kc.StoreOffsets([]kafka.TopicPartition{tp}); err != nil {
		r.logger.Warn("storing offset", "topic", p.topic, "partition", p.id, "offset", next, "err", fmt.Errorf("storing offset: %w", err))
		return
	}
	p.next.Store(next)
}

func (r *Runtime) count(result string, n int) {
	if n > 0 {
		eventsTotal.WithLabelValues(r.opts.Name, result).Add(float64(n))
	}
}
