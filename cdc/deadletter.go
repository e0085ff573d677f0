package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
)

// Records the relay can never deliver.
//
// A producer error is permanent for a record when Kafka refuses the record
// itself or its topic (publish.Permanent): over the topic's
// max.message.bytes, a routed topic that does not exist or is not
// authorised, an invalid record. Such a record is written to the
// dead-letter table and counted as settled, so the transaction's LSN can be
// confirmed past it and later events flow. Any other error ends the session
// and the record is republished, as before.
//
// Kafka refuses whole batches: an innocent record batched with an oversized
// one gets the same error. So a permanent error in a delivery report only
// makes the record a suspect and ends the session; the next session
// produces each suspect alone — after every earlier record was
// acknowledged, and before any later one is produced — and dead-letters it
// only if Kafka refuses it again by itself. Errors that Produce returns at
// once (the producer's own message.max.bytes, for instance) and headers the
// relay cannot build concern the one record, and dead-letter it at once.
//
// The dead letter is written on the control connection, which holds the
// leadership lock, before the record counts as settled: the LSN never
// passes a refused record that is not durably in the table. A write that
// fails ends the session like a failed delivery.

// maxSuspects bounds the suspects remembered across sessions.
const maxSuspects = 10000

// suspects are event IDs whose delivery failed with a permanent error in a
// batch; each is produced alone by the next session.
type suspects struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (s *suspects) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	if len(s.ids) < maxSuspects {
		s.ids[id] = struct{}{}
	}
}

func (s *suspects) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

func (s *suspects) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

// deadLetter is one outbox event the relay cannot deliver.
type deadLetter struct {
	ev    *decode.Event
	topic string
	lsn   pglogrepl.LSN // where the slot sent its INSERT
	cause error
}

// deadLetterWriter stores a dead letter durably; once write returns nil the
// record may count as settled.
type deadLetterWriter interface {
	write(ctx context.Context, dl deadLetter) error
}

// tableWriter writes dead letters to the dead-letter table on the control
// connection.
type tableWriter struct {
	ctl   *control
	table pgx.Identifier
	slot  string
}

// insertDeadLetter writes a dead letter; a record refused again (a later
// session, a replay that failed) updates its row and counts the attempt.
const insertDeadLetter = `INSERT INTO %s AS d (event_id, slot, lsn, topic, aggregatetype, aggregateid, type, payload, headers,
	created_at, error_code, error)
VALUES ($1, $2, $3::pg_lsn, $4, $5, $6, $7, $8, $9, NULLIF($10, '')::timestamptz, $11, $12)
ON CONFLICT (event_id) DO UPDATE SET slot = EXCLUDED.slot, lsn = EXCLUDED.lsn, topic = EXCLUDED.topic,
	error_code = EXCLUDED.error_code, error = EXCLUDED.error, attempts = d.attempts + 1,
	dead_lettered_at = now(), replayed_at = NULL`

func (w tableWriter) write(ctx context.Context, dl deadLetter) error {
	ev := dl.ev
	headers := ev.HeadersJSON
	if headers == "" {
		headers = "{}"
	}
	err := w.ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, fmt.Sprintf(insertDeadLetter, w.table.Sanitize()),
			ev.ID, w.slot, dl.lsn.String(), dl.topic, ev.AggregateType, ev.AggregateID, ev.Type,
			string(ev.Payload), headers, ev.CreatedAt, deadLetterCode(dl.cause), dl.cause.Error())
		return err
	})
	if err != nil {
		return fmt.Errorf("writing dead letter of event %s: %w", ev.ID, err)
	}
	return nil
}

// deadLetterCode classifies a dead letter's cause for the table.
func deadLetterCode(err error) string {
	if errors.Is(err, decode.ErrMalformedHeaders) {
		return "malformed headers"
	}
	return publish.ErrorCode(err)
}

// deadLetter writes ev, whose event of size bytes was added to the current
// transaction, to the dead-letter place, then counts it as settled.
func (s *session) deadLetter(ctx context.Context, ev *decode.Event, lsn pglogrepl.LSN, size int, cause error) error {
	if err := s.storeDeadLetter(ctx, s.dead, ev, lsn, cause); err != nil {
		s.tracker.Release(s.curTx, size)
		return err
	}
	s.tracker.Ack(s.curTx, size)
	s.suspects.remove(ev.ID)
	return nil
}

// storeDeadLetter writes ev, refused for cause, with w; once it returned nil
// the event may count as settled. It counts and logs the dead letter.
func (r *reader) storeDeadLetter(ctx context.Context, w deadLetterWriter, ev *decode.Event, lsn pglogrepl.LSN, cause error) error {
	topic := publish.Router{Topics: r.cfg.Topics, Fallback: r.cfg.TopicFallback}.Topic(ev.AggregateType)
	if err := w.write(ctx, deadLetter{ev: ev, topic: topic, lsn: lsn, cause: cause}); err != nil {
		return err
	}
	r.m.deadLettered.Inc()
	r.logger.Error("event dead-lettered: Kafka can never accept it as it is; replay it with `eventforge outbox dead-letters replay` once the cause is fixed",
		"event_id", ev.ID, "order_id", ev.AggregateID, "topic", topic, "lsn", lsn.String(), "err", cause)
	return nil
}

// publishAlone produces a suspect with nothing else in flight and waits for
// its outcome: acknowledged, dead-lettered when Kafka refuses it again
// permanently, or an error that ends the session.
func (s *session) publishAlone(ctx context.Context, ev *decode.Event, lsn pglogrepl.LSN, size int) error {
	if err := s.drain(ctx, func() bool { return s.tracker.Inflight() == 0 }); err != nil {
		return err
	}
	s.logger.Info("producing a suspect event alone", "event_id", ev.ID, "lsn", lsn.String())
	done := make(chan error, 1)
	s.tracker.Add(s.curTx, size)
	err := s.pub.Publish(ctx, ev, s.curTx, &delivery{tx: s.curTx, eventID: ev.ID, size: size, alone: done})
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
	if publish.Permanent(err) {
		return s.deadLetter(ctx, ev, lsn, size, err)
	}
	s.tracker.Release(s.curTx, size)
	s.m.errors.Inc()
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
			s.m.errors.Inc()
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
