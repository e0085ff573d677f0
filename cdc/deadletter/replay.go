package deadletter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/sink"
)

// ReplayConfig selects dead letters to republish.
type ReplayConfig struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string
	// Driver opens the sink the dead letters are republished to.
	Driver sink.Driver
	// Table is the schema-qualified dead-letter table.
	Table string
	// EventIDs selects dead letters by event ID; empty selects every one
	// not replayed yet.
	EventIDs []string
	// FlushTimeout bounds the wait for acknowledgements (default 30s).
	FlushTimeout time.Duration
}

// ReplayResult summarises a replay of dead letters.
type ReplayResult struct {
	Selected  int      // dead letters selected
	Published int      // acknowledged by Kafka and marked replayed
	Missing   []string // selected event IDs without a dead letter
}

// Replay republishes dead letters to the topic each was refused
// on, with its original event ID, key, headers and payload (the record the
// relay would have produced), in WAL order, waits for Kafka to acknowledge
// each, and marks the acknowledged ones replayed. Run it once the cause is
// fixed (e.g. the topic's max.message.bytes raised); a record Kafka still
// refuses stays pending and is reported in the error.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayResult, error) {
	var res ReplayResult
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 30 * time.Second
	}
	ident, err := outbox.ParseTable(cfg.Table)
	if err != nil {
		return res, err
	}
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return res, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	selected, err := selectDeadLetters(ctx, conn, ident, cfg)
	if err != nil {
		return res, err
	}
	res.Selected = len(selected)
	found := map[string]bool{}
	for _, x := range selected {
		found[x.ev.ID] = true
	}
	for _, id := range cfg.EventIDs {
		if !found[id] {
			res.Missing = append(res.Missing, id)
		}
	}
	if len(selected) == 0 {
		return res, nil
	}

	var (
		mu       sync.Mutex
		acked    []string
		failures []error
	)
	pub, err := cfg.Driver.Open("eventforge-dead-letter-replay",
		func(opaque any, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Errorf("delivering event %s: %w", opaque.(string), err))
				return
			}
			acked = append(acked, opaque.(string))
		})
	if err != nil {
		return res, err
	}
	for i := range selected {
		x := &selected[i]
		if x.ev.Headers, err = decode.ParseHeaders(x.ev.ID, x.ev.HeadersJSON); err != nil {
			mu.Lock()
			failures = append(failures, fmt.Errorf("%w (fix the row's headers first)", err))
			mu.Unlock()
			continue
		}
		if err := pub.Publish(ctx, &x.ev, x.topic, nil, x.ev.ID); err != nil {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		}
	}
	if left := pub.Close(cfg.FlushTimeout); left > 0 {
		failures = append(failures, fmt.Errorf("%d records not acknowledged within %s", left, cfg.FlushTimeout))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) > 0 {
		tag, err := conn.Exec(context.WithoutCancel(ctx), `UPDATE `+ident.Sanitize()+` SET replayed_at = now() WHERE event_id = ANY($1::text[])`, acked)
		if err != nil {
			return res, fmt.Errorf("marking %d replayed dead letters (they are in Kafka; a second replay republishes them): %w", len(acked), err)
		}
		res.Published = int(tag.RowsAffected())
	}
	if len(failures) > 0 {
		return res, fmt.Errorf("replay incomplete (%d of %d acknowledged): %w", res.Published, res.Selected, errors.Join(failures...))
	}
	return res, nil
}

// deadLetterRow is a dead letter selected for replay.
type deadLetterRow struct {
	ev    decode.Event
	topic string
}

// selectDeadLetters reads the dead letters cfg selects, in LSN order.
func selectDeadLetters(ctx context.Context, conn *pgx.Conn, ident outbox.Table, cfg ReplayConfig) ([]deadLetterRow, error) {
	where, args := `replayed_at IS NULL`, []any{}
	if len(cfg.EventIDs) > 0 {
		where, args = `event_id = ANY($1::text[])`, []any{cfg.EventIDs}
	}
	rows, _ := conn.Query(ctx, `SELECT event_id, topic, aggregatetype, aggregateid, type, payload, headers, coalesce(created_at::text, '')
		FROM `+ident.Sanitize()+` WHERE `+where+` ORDER BY lsn, event_id`, args...)
	selected, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (deadLetterRow, error) {
		var x deadLetterRow
		var payload string
		err := r.Scan(&x.ev.ID, &x.topic, &x.ev.AggregateType, &x.ev.AggregateID, &x.ev.Type, &payload, &x.ev.HeadersJSON, &x.ev.CreatedAt)
		x.ev.Payload = []byte(payload)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading dead letters from %s: %w", cfg.Table, err)
	}
	return selected, nil
}
