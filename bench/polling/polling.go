// Package polling is the polling outbox relay the benchmark measures
// EventForge against: the classic alternative to change data capture, done
// as a careful user would do it. It is a baseline of the benchmark, not a
// mode of EventForge.
//
// Workers claim batches of outbox rows with SELECT … ORDER BY seq LIMIT n
// FOR UPDATE SKIP LOCKED in a transaction, produce them to Kafka with the
// same idempotent, acks=all producer and the same record (cdc/sink/kafkasink.Record)
// the CDC reader uses, wait for every acknowledgement, delete the rows and
// commit. A row is deleted only after Kafka acknowledged its record, so a
// crash publishes it again (at least once; consumers dedupe on the event ID).
//
// The rule it enforces is per-order order: the events of one order reach
// Kafka in the order they were committed. Rows are split into Workers
// buckets by a hash of the aggregate ID; worker w claims only bucket w, and
// only while it holds the transaction-scoped advisory lock of bucket w, so
// one transaction at a time, in the whole deployment, claims from a bucket.
// Within a bucket it takes rows in seq order and publishes batch k+1 only
// after batch k is acknowledged and deleted; Kafka keeps the order of one
// key's records in its partition (idempotent producer). seq is an identity
// column with CACHE 1, so a later event of an order, whose transaction
// begins after the earlier one committed, always has a larger seq. Without
// buckets, SKIP LOCKED lets a second worker take an order's next event while
// the first still publishes the previous one; docs/bench.md gives the
// argument in full.
package polling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/internal/config"
)

// Command is the first argument of eventforge-bench that runs the relay
// instead of the benchmark: the benchmark starts the relay as a process of
// its own, so that its memory and CPU are its own.
const Command = "polling-relay"

// lockClass is the first key of the buckets' advisory locks, so that they
// do not collide with other advisory locks of the database.
const lockClass = 0x0f0f

// Config configures the relay.
type Config struct {
	// DatabaseURL is the database whose outbox the relay publishes; it must
	// have been prepared with Prepare for the same number of workers.
	DatabaseURL string `name:"database-url" help:"PostgreSQL URL of the database whose outbox is relayed." required:""`
	// Brokers is the Kafka bootstrap address.
	Brokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	// Topic receives every event.
	Topic string `name:"topic" help:"Kafka topic of the events." required:""`
	// Workers is the number of workers and of buckets.
	Workers int `name:"workers" help:"Workers, one per bucket of aggregate IDs (as prepared)." default:"4"`
	// BatchSize is the most rows one claim takes.
	BatchSize int `name:"batch-size" help:"Most rows one claim takes." default:"500"`
	// PollInterval is the pause after a claim that found less than a full
	// batch; after a full batch the worker claims again at once.
	PollInterval time.Duration `name:"poll-interval" help:"Pause after a claim that was not full." default:"100ms"`
}

// DefaultConfig returns the settings docs/bench.md explains: the defaults
// of the flags (their tags, read by config.Defaults). DatabaseURL and Topic
// have none.
func DefaultConfig() Config {
	return config.Defaults[Config]()
}

// Validate reports a setting the relay cannot run with.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "" || c.Topic == "" || c.Brokers == "":
		return errors.New("polling relay: database URL, topic and brokers are required")
	case c.Workers < 1 || c.BatchSize < 1 || c.PollInterval <= 0:
		return fmt.Errorf("polling relay: workers %d, batch size %d and poll interval %s must be positive", c.Workers, c.BatchSize, c.PollInterval)
	}
	return nil
}

// bucketExpr is the bucket of a row: a non-negative hash of its aggregate ID
// modulo the number of workers. The claim spells it exactly as the index
// does, so the planner uses the index.
func bucketExpr(workers int) string {
	return fmt.Sprintf("((hashtext(aggregateid) & 2147483647) %% %d)", workers)
}

// Prepare adds what the relay needs to the outbox of the database behind
// pool: an insertion sequence (seq, an identity column with CACHE 1) and an
// index on (bucket, seq) for workers buckets. It belongs to the benchmark's
// own database: EventForge's schema has neither, because its reader follows
// the WAL. Call it before rows are inserted, since rows already present get
// sequence numbers in no particular order.
func Prepare(ctx context.Context, pool *pgxpool.Pool, workers int) error {
	stmt := fmt.Sprintf(`ALTER TABLE outbox ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY (CACHE 1);
		CREATE INDEX outbox_polling_claim_idx ON outbox (%s, seq)`, bucketExpr(workers))
	if _, err := pool.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("preparing the outbox for polling: %w", err)
	}
	return nil
}

// Run relays until ctx ends or an error stops a worker; it returns nil when
// ctx ended.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("parsing database URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.Workers)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	pub, err := kafkasink.New(kafkasink.Options{
		Bootstrap: cfg.Brokers, ClientID: "eventforge-bench-polling",
		// As the reader: no record times out, so a Kafka outage pauses the
		// relay instead of failing records out of order.
		Extra: kafka.ConfigMap{"message.timeout.ms": 0},
	}, logger, func(opaque any, err error) { opaque.(*batch).ack(err) })
	if err != nil {
		return err
	}
	defer pub.Close(10 * time.Second)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, cfg.Workers+1)
	var wg sync.WaitGroup
	for b := range cfg.Workers {
		w := &worker{cfg: cfg, pool: pool, pub: pub, bucket: b,
			claimSQL: fmt.Sprintf(`SELECT id::text, aggregatetype, aggregateid, type, payload::text, headers::text, created_at::text
				FROM outbox WHERE %s = $1 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED`, bucketExpr(cfg.Workers))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(ctx); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w.bucket, err)
			}
		}()
	}
	logger.Info("polling relay started", "workers", cfg.Workers, "batch_size", cfg.BatchSize, "poll_interval", cfg.PollInterval, "topic", cfg.Topic)
	select {
	case <-ctx.Done():
		wg.Wait()
		return nil
	case err = <-errs:
	case err = <-pub.Fatal():
		err = fmt.Errorf("kafka producer: %w", err)
	}
	cancel()
	wg.Wait()
	return err
}

// publisher is what a worker needs of the Kafka publisher.
type publisher interface {
	Publish(ctx context.Context, ev *decode.Event, topic string, group, opaque any) error
}

// worker claims, publishes and deletes the rows of one bucket.
type worker struct {
	cfg      Config
	pool     *pgxpool.Pool
	pub      publisher
	bucket   int
	claimSQL string
}

func (w *worker) run(ctx context.Context) error {
	for {
		n, err := w.relayBatch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if n == w.cfg.BatchSize {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.cfg.PollInterval):
		}
	}
}

// relayBatch claims up to a batch of the bucket's rows, publishes them,
// waits for Kafka's acknowledgements, deletes them and commits. It returns
// how many rows it relayed.
func (w *worker) relayBatch(ctx context.Context) (int, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("beginning claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var owned bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, $2)`, lockClass, w.bucket).Scan(&owned); err != nil {
		return 0, fmt.Errorf("locking bucket %d: %w", w.bucket, err)
	}
	if !owned {
		return 0, nil // another relay process holds the bucket
	}
	events, err := w.claim(ctx, tx)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	b := newBatch(len(events))
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
		if err := w.pub.Publish(ctx, ev, w.cfg.Topic, b, b); err != nil {
			return 0, err
		}
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-b.done:
	}
	if err := b.failed(); err != nil {
		return 0, fmt.Errorf("publishing: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1::uuid[])`, ids); err != nil {
		return 0, fmt.Errorf("deleting published rows: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("committing claim: %w", err)
	}
	return len(events), nil
}

// claim selects the bucket's oldest rows, locking them.
func (w *worker) claim(ctx context.Context, tx pgx.Tx) ([]*decode.Event, error) {
	rows, err := tx.Query(ctx, w.claimSQL, w.bucket, w.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("claiming bucket %d: %w", w.bucket, err)
	}
	var events []*decode.Event
	for rows.Next() {
		var ev decode.Event
		var payload string
		if err := rows.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &payload, &ev.HeadersJSON, &ev.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading claimed row: %w", err)
		}
		ev.Payload = []byte(payload)
		if err := json.Unmarshal([]byte(ev.HeadersJSON), &ev.Headers); err != nil {
			rows.Close()
			return nil, fmt.Errorf("event %s: %w", ev.ID, decode.ErrMalformedHeaders)
		}
		events = append(events, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claiming bucket %d: %w", w.bucket, err)
	}
	return events, nil
}

// batch counts a claim's outstanding acknowledgements.
type batch struct {
	pending atomic.Int64
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

func newBatch(n int) *batch {
	b := &batch{done: make(chan struct{})}
	b.pending.Store(int64(n))
	return b
}

// ack records one record's outcome; the last one closes done.
func (b *batch) ack(err error) {
	if err != nil {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	if b.pending.Add(-1) == 0 {
		close(b.done)
	}
}

// failed returns the first delivery error of the batch.
func (b *batch) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
