// Package deadletter keeps the outbox events the relay can never deliver.
//
// A sink error is permanent for a record when the destination refuses the
// record itself or its topic (sink.Driver.Permanent): over the topic's
// max.message.bytes, a routed topic that does not exist or is not
// authorised, an invalid record. Such a record is written to the
// dead-letter table and counts as settled, so the transaction's LSN can be
// confirmed past it and later events flow; any other error ends the
// session and the record is republished. Headers the relay cannot build a
// record from dead-letter the row too.
//
// The dead letter is written on the control connection, which holds the
// leadership lock, before the record counts as settled: the LSN never
// passes a refused record that is not durably in the table. A write that
// fails ends the session like a failed delivery.
//
// Kafka refuses whole batches: an innocent record batched with an oversized
// one gets the same error. So a permanent error in a delivery report only
// makes the record a suspect (Suspects); the stream then produces each
// suspect alone and dead-letters it only if it is refused again by itself.
//
// List and Replay serve `eventforge outbox dead-letters`.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/sink"
)

// Letter is one outbox event the relay cannot deliver.
type Letter struct {
	Event *decode.Event
	Topic string
	LSN   pglogrepl.LSN // where the slot sent its INSERT (or the recovery's slot start)
	Cause error
	Code  string // the cause's code (sink.Driver.ErrorCode, or "malformed headers")
}

// Writer stores a dead letter durably; once Write returns nil the record may
// count as settled.
type Writer interface {
	Write(ctx context.Context, dl Letter) error
}

// TableWriter writes dead letters to the dead-letter table on the control
// connection.
type TableWriter struct {
	Control *control.Conn
	Table   outbox.Table
	Slot    string
}

// insertDeadLetter writes a dead letter; a record refused again (a later
// session, a replay that failed) updates its row and counts the attempt.
const insertDeadLetter = `INSERT INTO %s AS d (event_id, slot, lsn, topic, aggregatetype, aggregateid, type, payload, headers,
	created_at, error_code, error)
VALUES ($1, $2, $3::pg_lsn, $4, $5, $6, $7, $8, $9, NULLIF($10, '')::timestamptz, $11, $12)
ON CONFLICT (event_id) DO UPDATE SET slot = EXCLUDED.slot, lsn = EXCLUDED.lsn, topic = EXCLUDED.topic,
	error_code = EXCLUDED.error_code, error = EXCLUDED.error, attempts = d.attempts + 1,
	dead_lettered_at = now(), replayed_at = NULL`

// Write implements Writer.
func (w TableWriter) Write(ctx context.Context, dl Letter) error {
	ev := dl.Event
	headers := ev.HeadersJSON
	if headers == "" {
		headers = "{}"
	}
	err := w.Control.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, fmt.Sprintf(insertDeadLetter, w.Table.Sanitize()),
			ev.ID, w.Slot, dl.LSN.String(), dl.Topic, ev.AggregateType, ev.AggregateID, ev.Type,
			string(ev.Payload), headers, ev.CreatedAt, dl.Code, dl.Cause.Error())
		return err
	})
	if err != nil {
		return fmt.Errorf("writing dead letter of event %s: %w", ev.ID, err)
	}
	return nil
}

// Recorder dead-letters events: it stores each with its Writer, counts it
// and logs it.
type Recorder struct {
	Writer  Writer
	Router  sink.Router
	Driver  sink.Driver // names the cause's code
	Counter prometheus.Counter
	Logger  *slog.Logger
}

// Store writes ev, refused for cause, at lsn; once it returned nil the event
// may count as settled.
func (r *Recorder) Store(ctx context.Context, ev *decode.Event, lsn pglogrepl.LSN, cause error) error {
	topic := r.Router.Topic(ev.AggregateType)
	code := "malformed headers"
	if !errors.Is(cause, decode.ErrMalformedHeaders) {
		code = r.Driver.ErrorCode(cause)
	}
	if err := r.Writer.Write(ctx, Letter{Event: ev, Topic: topic, LSN: lsn, Cause: cause, Code: code}); err != nil {
		return err
	}
	r.Counter.Inc()
	r.Logger.Error("event dead-lettered: Kafka can never accept it as it is; replay it with `eventforge outbox dead-letters replay` once the cause is fixed",
		"event_id", ev.ID, "order_id", ev.AggregateID, "topic", topic, "lsn", lsn.String(), "err", cause)
	return nil
}
