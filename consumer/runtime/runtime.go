// Package runtime is the consumer runtime shared by every EventForge
// handler. It owns the Kafka consumer group, the PostgreSQL transaction and
// the durable (consumer, event_id) mark; a Handler only applies the business
// change inside that transaction.
//
// The contract, per event:
//  1. one transaction inserts (consumer, event_id) into processed_events with
//     ON CONFLICT DO NOTHING; if the mark already existed the event is a
//     duplicate and nothing else happens;
//  2. otherwise the handler applies the business change in the same
//     transaction; if it fails the transaction rolls back, leaving no mark;
//  3. only after COMMIT is the Kafka offset stored for commit.
//
// A crash after step 2's commit and before the offset commit redelivers the
// event; step 1 turns the redelivery into a no-op. docs/consumer.md is the
// contract in prose.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Failpoints of the runtime (see internal/failpoint).
const (
	// FailpointBeforeDBCommit fires after the handler applied the change and
	// before the transaction commits.
	FailpointBeforeDBCommit = "consumer.before_db_commit"
	// FailpointAfterDBCommitBeforeOffset fires after the transaction
	// committed and before the Kafka offset is stored.
	FailpointAfterDBCommitBeforeOffset = "consumer.after_db_commit_before_offset"
)

// Event is one Kafka record as a handler sees it.
type Event struct {
	ID        uuid.UUID // header "id": the outbox event ID
	Type      string    // header "type", e.g. "OrderCreated"
	Key       string    // the aggregate ID (order ID)
	Payload   []byte
	Topic     string
	Partition int32
	Offset    int64
}

// Handler applies an event's business change inside the runtime's
// transaction. It must do all its writes through tx, must not commit or roll
// back, and returns an error to roll everything back (including the mark).
type Handler interface {
	Apply(ctx context.Context, tx pgx.Tx, ev Event) error
}

// ErrMalformed marks a record that can never be applied (missing or invalid
// event ID); it is wrapped in the returned error.
var ErrMalformed = errors.New("malformed record")

// Options configure a Runtime.
type Options struct {
	Name         string        // consumer name, the first half of the mark
	Group        string        // Kafka consumer group id
	Topics       []string      // topics to subscribe to
	Bootstrap    string        // Kafka bootstrap servers
	MaxBackoff   time.Duration // cap of the retry backoff
	CommitPeriod time.Duration // how often stored offsets are committed
}

// Runtime consumes Topics with a Handler. Create with New, then Run.
type Runtime struct {
	opts    Options
	pool    *pgxpool.Pool
	handler Handler
	logger  *slog.Logger
}

// New returns a runtime applying events through handler with pool.
func New(opts Options, pool *pgxpool.Pool, handler Handler, logger *slog.Logger) *Runtime {
	return &Runtime{opts: opts, pool: pool, handler: handler, logger: logger.With("consumer", opts.Name)}
}

// Run consumes until ctx is cancelled, then commits the stored offsets and
// leaves the group.
func (r *Runtime) Run(ctx context.Context) error {
	logs := make(chan kafka.LogEvent, 128)
	cfg := kafkaconf.Base(r.opts.Bootstrap, "eventforge-"+r.opts.Name, logs)
	settings := kafka.ConfigMap{
		"group.id":                      r.opts.Group,
		"partition.assignment.strategy": "cooperative-sticky",
		"auto.offset.reset":             "earliest",
		// Offsets are stored by the runtime only after the DB commit and
		// committed periodically, on revoke and on close.
		"enable.auto.offset.store": false,
		"enable.auto.commit":       true,
		"auto.commit.interval.ms":  int(r.opts.CommitPeriod / time.Millisecond),
	}
	for k, v := range settings {
		cfg[k] = v
	}
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		close(logs)
		return fmt.Errorf("creating kafka consumer: %w", err)
	}
	go kafkaconf.BridgeLogs(logs, r.logger)
	defer close(logs)

	if err := c.SubscribeTopics(r.opts.Topics, r.rebalance); err != nil {
		c.Close()
		return fmt.Errorf("subscribing to %v: %w", r.opts.Topics, err)
	}
	r.logger.Info("consumer started", "group", r.opts.Group, "topics", r.opts.Topics)

	runErr := r.loop(ctx, c)

	if _, err := c.Commit(); err != nil && !isNoOffset(err) {
		r.logger.Warn("committing offsets at shutdown", "err", err)
	}
	if err := c.Close(); err != nil {
		r.logger.Warn("closing kafka consumer", "err", err)
	}
	r.logger.Info("consumer stopped")
	return runErr
}

func (r *Runtime) loop(ctx context.Context, c *kafka.Consumer) error {
	for ctx.Err() == nil {
		switch e := c.Poll(200).(type) {
		case *kafka.Message:
			if err := r.handle(ctx, e); err != nil {
				if ctx.Err() != nil {
					return nil // not stored: redelivered after restart
				}
				return err
			}
			if _, err := c.StoreMessage(e); err != nil {
				return fmt.Errorf("storing offset %d of %s[%d]: %w", e.TopicPartition.Offset, *e.TopicPartition.Topic, e.TopicPartition.Partition, err)
			}
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("kafka consumer: %w", e)
			}
			r.logger.Warn("kafka consumer error", "err", e)
		}
	}
	return nil
}

// rebalance commits what was stored for partitions being revoked, so the
// next owner starts after the last applied event.
func (r *Runtime) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		r.logger.Info("partitions assigned", "partitions", partitionList(e.Partitions))
	case kafka.RevokedPartitions:
		r.logger.Info("partitions revoked", "partitions", partitionList(e.Partitions), "lost", c.AssignmentLost())
		if !c.AssignmentLost() {
			if _, err := c.Commit(); err != nil && !isNoOffset(err) {
				r.logger.Warn("committing offsets on revoke", "err", err)
			}
		}
	}
	return nil
}

func partitionList(tps []kafka.TopicPartition) []int32 {
	out := make([]int32, 0, len(tps))
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

func isNoOffset(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Code() == kafka.ErrNoOffset
}

// handle applies one record, retrying with capped exponential backoff and
// jitter until it is applied or found to be a duplicate. It returns only when
// the record's transaction committed or ctx ended.
func (r *Runtime) handle(ctx context.Context, m *kafka.Message) error {
	ev, err := toEvent(m)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err == nil {
			var applied bool
			applied, err = r.apply(ctx, ev)
			if err == nil {
				r.logger.Debug("event handled", "event_id", ev.ID, "partition", ev.Partition, "offset", ev.Offset, "applied", applied)
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.logger.Warn("event not applied; retrying", "err", err, "topic", *m.TopicPartition.Topic,
			"partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "attempt", attempt, "backoff", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, r.opts.MaxBackoff)
		if errors.Is(err, ErrMalformed) {
			ev, err = toEvent(m)
		}
	}
}

// apply runs the mark and the handler in one transaction. applied is false
// for a duplicate.
func (r *Runtime) apply(ctx context.Context, ev Event) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var processedAt time.Time
		err := tx.QueryRow(ctx, `INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2)
			ON CONFLICT DO NOTHING RETURNING processed_at`, r.opts.Name, ev.ID).Scan(&processedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // duplicate: the mark exists, the effect happened once
		}
		if err != nil {
			return fmt.Errorf("marking event %s: %w", ev.ID, err)
		}
		if err := r.handler.Apply(ctx, tx, ev); err != nil {
			return fmt.Errorf("applying event %s (%s): %w", ev.ID, ev.Type, err)
		}
		applied = true
		return failpoint.Eval(ctx, FailpointBeforeDBCommit)
	})
	if err != nil {
		return false, err
	}
	if err := failpoint.Eval(ctx, FailpointAfterDBCommitBeforeOffset); err != nil {
		return applied, err
	}
	return applied, nil
}

func toEvent(m *kafka.Message) (Event, error) {
	ev := Event{
		Key:       string(m.Key),
		Payload:   m.Value,
		Topic:     *m.TopicPartition.Topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
	}
	var rawID string
	for _, h := range m.Headers {
		switch h.Key {
		case "id":
			rawID = string(h.Value)
		case "type":
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
