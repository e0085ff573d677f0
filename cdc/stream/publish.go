package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// Records the sink refused in a batch (package deadletter says why they are
// suspects, not dead letters yet): the next session produces each alone,
// after every earlier record was acknowledged and before any later one is
// produced, and dead-letters it only if the sink refuses it again by
// itself.

// deadLetter writes ev, whose event of size bytes was added to the current
// transaction, to the dead-letter place, then counts it as settled.
func (s *session) deadLetter(ctx context.Context, ev *decode.Event, lsn pglogrepl.LSN, size int, cause error) error {
	if err := s.DeadLetters.Store(ctx, ev, lsn, cause); err != nil {
		s.tracker.Release(s.curTx, size)
		return err
	}
	s.tracker.Ack(s.curTx, size)
	s.Suspects.Remove(ev.ID)
	return nil
}

// publishAlone produces a suspect with nothing else in flight and waits for
// its outcome: acknowledged, dead-lettered when Kafka refuses it again
// permanently, or an error that ends the session.
func (s *session) publishAlone(ctx context.Context, ev *decode.Event, lsn pglogrepl.LSN, size int) error {
	if err := s.commitAt(ctx, s.curN); err != nil {
		return err
	}
	if err := s.drain(ctx, func() bool { return s.tracker.Inflight() == 0 }); err != nil {
		return err
	}
	s.Logger.Info("producing a suspect event alone", "event_id", ev.ID, "lsn", lsn.String())
	done := make(chan error, 1)
	s.tracker.Add(s.curTx, size)
	err := s.pub.Publish(ctx, ev, s.Router.Topic(ev.AggregateType), s.curTx, &delivery{tx: s.curTx, eventID: ev.ID, size: size, alone: done})
	if err == nil && s.txn != nil {
		// Stored alone: a sink transaction of its own, counted with the
		// events of its PostgreSQL transaction before it.
		s.txn.added(size)
		_ = s.commitAt(ctx, s.curN+1) // a failed commit reports the outcome as failed
	}
	if err == nil {
		var outcome error
		err = s.drain(ctx, func() bool {
			select {
			case outcome = <-done:
				return true
			default:
				return false
			}
		})
		if err != nil {
			return err
		}
		if outcome == nil {
			return nil
		}
		err = fmt.Errorf("delivering event %s: %w", ev.ID, outcome)
	}
	if s.Driver.Permanent(err) {
		return s.deadLetter(ctx, ev, lsn, size, err)
	}
	s.tracker.Release(s.curTx, size)
	s.Metrics.Errors.Inc()
	return err
}

// drain waits until ready reports true, going on with status updates; a
// failed delivery, a fatal producer error or ctx ends the wait.
func (s *session) drain(ctx context.Context, ready func() bool) error {
	t := time.NewTimer(s.cfg.StatusInterval)
	defer t.Stop()
	for !ready() {
		select {
		case <-s.space:
		case err := <-s.failed:
			return err
		case err := <-s.pub.Fatal():
			s.Metrics.Errors.Inc()
			return fmt.Errorf("kafka producer: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			t.Reset(s.cfg.StatusInterval)
		}
	}
	return nil
}

// insert produces one decoded outbox event of the open transaction (or
// dead-letters it when no record can be built from it); decodeErr is the
// decoder's ErrMalformedHeaders, if any.
func (s *session) insert(ctx context.Context, ev *decode.Event, walStart pglogrepl.LSN, decodeErr error) error {
	size := ev.Size() + recordOverhead
	if s.txn != nil && s.txn.skipping() {
		// Stored by an earlier session's sink transaction (txn.go).
		s.tracker.Add(s.curTx, size)
		s.tracker.Ack(s.curTx, size)
		s.curN++
		return nil
	}
	switch {
	case decodeErr != nil:
		// No record can be built: the one row, never the batch.
		s.tracker.Add(s.curTx, size)
		if err := s.deadLetter(ctx, ev, walStart, size, decodeErr); err != nil {
			return err
		}
	case s.Suspects.Has(ev.ID):
		if err := s.publishAlone(ctx, ev, walStart, size); err != nil {
			return err
		}
	default:
		s.tracker.Add(s.curTx, size)
		if err := s.pub.Publish(ctx, ev, s.Router.Topic(ev.AggregateType), s.curTx, &delivery{tx: s.curTx, eventID: ev.ID, size: size}); err != nil {
			if s.Driver.Permanent(err) {
				// The sink refused this record by itself.
				if err := s.deadLetter(ctx, ev, walStart, size, err); err != nil {
					return err
				}
				break
			}
			s.tracker.Release(s.curTx, size)
			return err
		}
		if s.txn != nil {
			s.txn.added(size)
		}
	}
	s.curN++
	if !s.midDone && s.tracker.Acked(s.curTx) > 0 {
		s.midDone = true
		if err := failpoint.Eval(ctx, failpoint.CDCMidTransaction); err != nil {
			return err
		}
	}
	return nil
}
