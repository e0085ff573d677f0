package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
)

// DeadLetter is one row of the relay's dead-letter table.
type DeadLetter struct {
	EventID        string     `json:"event_id"`
	Slot           string     `json:"slot"`
	LSN            string     `json:"lsn"`
	Topic          string     `json:"topic"`
	AggregateType  string     `json:"aggregatetype"`
	AggregateID    string     `json:"aggregateid"`
	Type           string     `json:"type"`
	PayloadBytes   int        `json:"payload_bytes"`
	ErrorCode      string     `json:"error_code"`
	Error          string     `json:"error"`
	Attempts       int        `json:"attempts"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	ReplayedAt     *time.Time `json:"replayed_at"`
}

// ListDeadLetters reads the dead letters of table in WAL order; with
// pending, only those not replayed yet.
func ListDeadLetters(ctx context.Context, conn *pgx.Conn, table string, pending bool) ([]DeadLetter, error) {
	ident, err := tableIdent(table)
	if err != nil {
		return nil, err
	}
	where := ""
	if pending {
		where = " WHERE replayed_at IS NULL"
	}
	rows, _ := conn.Query(ctx, `SELECT event_id, slot, lsn::text, topic, aggregatetype, aggregateid, type, octet_length(payload),
		error_code, error, attempts, dead_lettered_at, replayed_at FROM `+ident.Sanitize()+where+` ORDER BY lsn, event_id`)
	dls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		err := r.Scan(&d.EventID, &d.Slot, &d.LSN, &d.Topic, &d.AggregateType, &d.AggregateID, &d.Type, &d.PayloadBytes,
			&d.ErrorCode, &d.Error, &d.Attempts, &d.DeadLetteredAt, &d.ReplayedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading dead letters from %s: %w", table, err)
	}
	return dls, nil
}

func tableIdent(table string) (pgx.Identifier, error) {
	ns, name, ok := strings.Cut(table, ".")
	if !ok {
		return nil, fmt.Errorf("table %q: want schema.table", table)
	}
	return pgx.Identifier{ns, name}, nil
}

// DeadLetterReplayConfig selects dead letters to republish.
type DeadLetterReplayConfig struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string
	// KafkaBrokers is the Kafka bootstrap server list.
	KafkaBrokers string
	// Table is the schema-qualified dead-letter table.
	Table string
	// EventIDs selects dead letters by event ID; empty selects every one
	// not replayed yet.
	EventIDs []string
	// FlushTimeout bounds the wait for acknowledgements (default 30s).
	FlushTimeout time.Duration
}

// DeadLetterReplayResult summarises a replay of dead letters.
type DeadLetterReplayResult struct {
	Selected  int      // dead letters selected
	Published int      // acknowledged by Kafka and marked replayed
	Missing   []string // selected event IDs without a dead letter
}

// ReplayDeadLetters republishes dead letters to the topic each was refused
// on, with its original event ID, key, headers and payload (the record the
// relay would have produced), in WAL order, waits for Kafka to acknowledge
// each, and marks the acknowledged ones replayed. Run it once the cause is
// fixed (e.g. the topic's max.message.bytes raised); a record Kafka still
// refuses stays pending and is reported in the error.
func ReplayDeadLetters(ctx context.Context, cfg DeadLetterReplayConfig, logger *slog.Logger) (DeadLetterReplayResult, error) {
	var res DeadLetterReplayResult
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 30 * time.Second
	}
	ident, err := tableIdent(cfg.Table)
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
	pub, err := publish.New(publish.Options{Bootstrap: cfg.KafkaBrokers, ClientID: "eventforge-dead-letter-replay"}, logger,
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
		if err := pub.PublishTo(ctx, &x.ev, x.topic, nil, x.ev.ID); err != nil {
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
func selectDeadLetters(ctx context.Context, conn *pgx.Conn, ident pgx.Identifier, cfg DeadLetterReplayConfig) ([]deadLetterRow, error) {
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
