// Package replay republishes stored outbox rows (`eventforge outbox
// replay`): for topics that lost data, with the rows' original event IDs,
// keys, headers and topics, so consumers see duplicates and skip what they
// applied.
package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/sink"
)

// Config selects stored outbox rows to republish and where to.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string
	// Driver opens the sink the rows are republished to.
	Driver sink.Driver
	// OutboxTable is the schema-qualified outbox table.
	OutboxTable string
	// Topics and TopicFallback route events exactly as the reader does.
	Topics        map[string]string
	TopicFallback string
	// EventIDs selects rows by event ID. When empty, Since and Until select
	// rows by created_at: Since ≤ created_at < Until.
	EventIDs []string
	// Since and Until bound created_at when EventIDs is empty.
	Since, Until time.Time
	// PageSize is how many rows are read per query (default 1000).
	PageSize int
	// FlushTimeout bounds the final wait for acknowledgements (default 30s).
	FlushTimeout time.Duration
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" || c.Driver == nil {
		errs = append(errs, errors.New("database-url and a sink (kafka-brokers) are required"))
	}
	if _, _, ok := strings.Cut(c.OutboxTable, "."); !ok {
		errs = append(errs, fmt.Errorf("outbox-table %q: want schema.table", c.OutboxTable))
	}
	switch {
	case len(c.EventIDs) > 0 && (!c.Since.IsZero() || !c.Until.IsZero()):
		errs = append(errs, errors.New("give either event IDs or a time range, not both"))
	case len(c.EventIDs) == 0 && (c.Since.IsZero() || c.Until.IsZero()):
		errs = append(errs, errors.New("give event IDs, or both --since and --until"))
	case len(c.EventIDs) == 0 && !c.Since.Before(c.Until):
		errs = append(errs, fmt.Errorf("--since %s is not before --until %s", c.Since.Format(time.RFC3339), c.Until.Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}

// Progress is told how far a replay got: total rows selected, rows
// acknowledged by Kafka so far. It is called from several goroutines, never
// at once.
type Progress func(acked, total int64)

// Result summarises a replay.
type Result struct {
	Selected  int64 // rows matching the selection when the replay started
	Published int64 // records acknowledged by Kafka
	Missing   []string
}

// Run republishes stored outbox rows with their original event IDs, keys,
// headers and topics, in created_at order, and waits for Kafka to acknowledge
// each. It is meant for topics that lost data: consumers see the records as
// duplicates of the original deliveries and skip events they applied. Event
// IDs without a stored row (pruned by retention) are reported in Missing.
func Run(ctx context.Context, cfg Config, progress Progress) (Result, error) {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1000
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 30 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("invalid replay: %w", err)
	}
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return Result{}, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	table := outbox.MustParseTable(cfg.OutboxTable)
	var withDeleted bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table.Deleted().Sanitize()).Scan(&withDeleted); err != nil {
		return Result{}, fmt.Errorf("looking up the table of deleted outbox rows: %w", err)
	}
	sel := newSelection(cfg, table, withDeleted)
	var res Result
	if err := sel.count(ctx, conn, &res); err != nil {
		return res, err
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	progress(0, res.Selected)

	var (
		acked    atomic.Int64
		failMu   sync.Mutex
		failures []error
		inflight = make(chan struct{}, cfg.PageSize)
		progMu   sync.Mutex
	)
	pub, err := cfg.Driver.Open("eventforge-replay", func(opaque any, err error) {
		<-inflight
		if err != nil {
			failMu.Lock()
			failures = append(failures, fmt.Errorf("delivering event %s: %w", opaque.(string), err))
			failMu.Unlock()
			return
		}
		n := acked.Add(1)
		progMu.Lock()
		progress(n, res.Selected)
		progMu.Unlock()
	})
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			pub.Close(time.Second)
		}
	}()

	if err := sel.publish(ctx, conn, pub, sink.Router{Topics: cfg.Topics, Fallback: cfg.TopicFallback}, cfg.PageSize, inflight); err != nil {
		return res, err
	}
	closed = true
	left := pub.Close(cfg.FlushTimeout)
	res.Published = acked.Load()
	failMu.Lock()
	defer failMu.Unlock()
	if left > 0 {
		failures = append(failures, fmt.Errorf("%d records not acknowledged within %s", left, cfg.FlushTimeout))
	}
	if len(failures) > 0 {
		return res, fmt.Errorf("replay incomplete (%d of %d acknowledged): %w", res.Published, res.Selected, errors.Join(failures...))
	}
	return res, nil
}

// selection is the outbox rows a replay selects: by event ID, or by
// creation time.
type selection struct {
	from     string // the outbox table, sanitized, or its union with its deleted rows
	where    string
	args     []any
	eventIDs []string
}

// newSelection selects from the outbox table and, withDeleted, the rows its
// writers deleted (outbox.Table.Deleted), which a replay can republish as
// well.
func newSelection(cfg Config, table outbox.Table, withDeleted bool) selection {
	from := table.Sanitize()
	if withDeleted {
		const cols = `id, aggregatetype, aggregateid, type, payload, headers, created_at`
		from = `(SELECT ` + cols + ` FROM ` + from + ` UNION ALL SELECT ` + cols + ` FROM ` + table.Deleted().Sanitize() + `) o`
	}
	where, args := `created_at >= $1 AND created_at < $2`, []any{cfg.Since, cfg.Until}
	if len(cfg.EventIDs) > 0 {
		where, args = `id::text = ANY($1::text[])`, []any{cfg.EventIDs}
	}
	return selection{from: from, where: where, args: args, eventIDs: cfg.EventIDs}
}

// count sets res.Selected to the number of selected rows and, for a
// selection by event ID, res.Missing to the IDs without a row.
func (sel selection) count(ctx context.Context, conn *pgx.Conn, res *Result) error {
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+sel.from+` WHERE `+sel.where, sel.args...).Scan(&res.Selected); err != nil {
		return fmt.Errorf("counting outbox rows to replay: %w", err)
	}
	if len(sel.eventIDs) > 0 {
		found := map[string]bool{}
		rows, _ := conn.Query(ctx, `SELECT id::text FROM `+sel.from+` WHERE `+sel.where, sel.args...)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("looking up event IDs: %w", err)
		}
		for _, id := range ids {
			found[id] = true
		}
		for _, id := range sel.eventIDs {
			if !found[strings.ToLower(id)] && !found[id] {
				res.Missing = append(res.Missing, id)
			}
		}
	}
	return nil
}

// page reads up to size selected rows after (*lastAt, *lastID) in
// created_at, id order, and moves both to the last row read.
func (sel selection) page(ctx context.Context, conn *pgx.Conn, size int, lastAt *time.Time, lastID *string) ([]decode.Event, error) {
	page := `SELECT id::text, aggregatetype, aggregateid, type, payload::text, headers::text, created_at::text AS created_text, created_at AS created_ts
		FROM ` + sel.from + ` WHERE ` + sel.where + ` AND (created_at, id::text) > ($` + fmt.Sprint(len(sel.args)+1) + `, $` + fmt.Sprint(len(sel.args)+2) +
		`) ORDER BY created_at, id::text LIMIT ` + fmt.Sprint(size)
	rows, err := conn.Query(ctx, page, append(sel.args, *lastAt, *lastID)...)
	if err != nil {
		return nil, fmt.Errorf("reading outbox rows: %w", err)
	}
	var events []decode.Event
	for rows.Next() {
		var ev decode.Event
		var payload, headers string
		if err := rows.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &payload, &headers, &ev.CreatedAt, lastAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading outbox row: %w", err)
		}
		ev.Payload = []byte(payload)
		if ev.Headers, err = decode.ParseHeaders(ev.ID, headers); err != nil {
			rows.Close()
			return nil, err
		}
		*lastID = ev.ID
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading outbox rows: %w", err)
	}
	return events, nil
}

// publish reads the selected rows page by page and hands each to pub,
// holding a slot of inflight per record until its delivery report.
func (sel selection) publish(ctx context.Context, conn *pgx.Conn, pub sink.Sink, router sink.Router, pageSize int, inflight chan struct{}) error {
	lastAt, lastID := time.Time{}, ""
	for {
		events, err := sel.page(ctx, conn, pageSize, &lastAt, &lastID)
		if err != nil {
			return err
		}
		for i := range events {
			select {
			case inflight <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := pub.Publish(ctx, &events[i], router.Topic(events[i].AggregateType), nil, events[i].ID); err != nil {
				<-inflight
				return err
			}
		}
		if len(events) < pageSize {
			return nil
		}
	}
}
