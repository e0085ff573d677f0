// Package engine is the consumer runtime shared by every EventForge
// handler. It owns the Kafka consumer group, the PostgreSQL transaction, the
// durable (consumer, event_id) mark, retries and the dead-letter queue; a
// Handler only applies the business change inside the transaction.
//
// The contract, per event:
//  1. one transaction inserts (consumer, event_id) into processed_events;
//     if the mark already existed the event is a duplicate and nothing else
//     happens;
//  2. otherwise the handler applies the business change in the same
//     transaction; if it fails the transaction rolls back, leaving no mark;
//  3. only after COMMIT — or after the DLQ acknowledged the record's
//     dead-letter copy — is the Kafka offset stored; stored offsets are
//     committed periodically, when partitions are revoked and at shutdown.
//
// Partitions are applied in parallel (at most Options.Workers at a time),
// each strictly in offset order. Up to Options.BatchSize consecutive records
// of one partition share a transaction; a failed batch is retried record by
// record, so a poison record is isolated. A record that fails is retried
// inline with exponential backoff and jitter while only its partition is
// paused; a permanent failure, or exhausted attempts, sends it to the DLQ
// topic "<source><suffix>". A record waits without an attempt limit while
// PostgreSQL is unavailable (see probe.go for how a database that hangs is
// told from a transaction that is slow). Waits between attempts hold no
// worker slot. A panic while applying is a failed attempt
// (ErrPanic). docs/consumer.md is the contract in prose.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Event is one Kafka record as a handler sees it.
type Event struct {
	ID        uuid.UUID // header "id": the outbox event ID
	Type      string    // header "type", e.g. "OrderCreated"
	Key       string    // the aggregate ID (order ID)
	Payload   []byte
	Headers   []kafka.Header
	Topic     string
	Partition int32
	Offset    int64
}

// Handler applies an event's business change inside the runtime's
// transaction. It must do all its writes through tx, must not commit or roll
// back, and returns an error to roll everything back (including the mark).
// It wraps ErrMalformed, ErrUnknownType or ErrInvalid into errors that no
// retry can fix, and ErrNotFound when the event's subject does not exist.
type Handler interface {
	Apply(ctx context.Context, tx pgx.Tx, ev Event) error
}

// Batcher is implemented by a Handler that can queue an event's statements
// on a pgx.Batch instead of running them, so that the runtime sends the
// statements of a whole batch of events in one round trip. Queue must do
// what Apply does, with the same errors: it returns errors found before any
// statement runs (a payload that does not decode) and checks results in the
// callbacks of the queries it queues (pgx.QueuedQuery), whose errors roll
// the transaction back like an error of Apply.
type Batcher interface {
	Queue(b *pgx.Batch, ev Event) error
}

// DB is the database the runtime applies events to; PoolDB implements it
// with a pgxpool.Pool.
type DB interface {
	// Begin starts a transaction on one of the DB's connections.
	Begin(ctx context.Context) (pgx.Tx, error)
	// Probe reports, within ctx, whether the server commits a
	// transaction running writes on a connection of its own: not one its
	// transactions may hold or wait for.
	Probe(ctx context.Context, writes func(ctx context.Context, tx pgx.Tx) error) error
}

// Prober is implemented by a Handler whose writes the runtime's probe tries
// too (probe.go): Probe runs in tx the statements Apply runs, on no rows
// (e.g. with a condition no row meets), so that a database that refuses
// them for every event — a table or column missing, a privilege revoked —
// fails the probe and is unavailable, while it changes nothing.
type Prober interface {
	Probe(ctx context.Context, tx pgx.Tx) error
}

// Runtime consumes Topics with a Handler. Create with New, then Run.
type Runtime struct {
	opts    Options
	db      DB
	handler Handler
	logger  *slog.Logger

	slots chan struct{} // bounds concurrently applying partitions
	dlq   *dlq.Producer
	kc    *kafka.Consumer // set by Run before subscribing

	workerErr atomic.Pointer[error] // a worker's panic outside an attempt: ends Run

	// Owned by the poll goroutine (Run's loop and the rebalance callback).
	parts map[partKey]*partition
}

// New returns a runtime applying events through handler with db.
func New(opts Options, db DB, handler Handler, logger *slog.Logger) *Runtime {
	opts = opts.withDefaults()
	return &Runtime{
		opts:    opts,
		db:      db,
		handler: handler,
		logger:  logger.With("consumer", opts.Name),
		slots:   make(chan struct{}, opts.Workers),
		parts:   map[partKey]*partition{},
	}
}

// Run consumes until ctx is cancelled, then lets in-flight transactions
// finish, commits the stored offsets and leaves the group.
func (r *Runtime) Run(ctx context.Context) error {
	initMetrics(r.opts.Name)
	logs := make(chan kafka.LogEvent, 128)
	defer close(logs)
	go kafkaconf.BridgeLogs(logs, r.logger)

	d, err := newDeadLetterer(ctx, r.opts, logs, r.logger)
	if err != nil {
		return err
	}
	defer d.Close()
	r.dlq = d

	cfg := kafkaconf.Base(r.opts.Bootstrap, "eventforge-"+r.opts.Name, logs)
	for k, v := range consumerSettings(r.opts) {
		cfg[k] = v
	}
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return fmt.Errorf("creating kafka consumer: %w", err)
	}
	r.kc = c
	if err := c.SubscribeTopics(r.opts.Topics, r.rebalance); err != nil {
		c.Close()
		return fmt.Errorf("subscribing to %v: %w", r.opts.Topics, err)
	}
	r.logger.Info("consumer started", "group", r.opts.Group, "topics", r.opts.Topics,
		"workers", r.opts.Workers, "batch_size", r.opts.BatchSize, "max_attempts", r.opts.MaxAttempts)

	statsCtx, stopStats := context.WithCancel(ctx)
	var statsDone sync.WaitGroup
	statsDone.Go(func() { r.dlqStats(statsCtx, logs) })
	statsDone.Go(func() { r.pruneMarks(statsCtx, logs) })

	runErr := r.loop(ctx, c)

	// Let in-flight transactions finish and store their offsets, then commit.
	r.stopAll()
	if _, err := c.Commit(); err != nil && !isNoOffset(err) {
		r.logger.Warn("committing offsets at shutdown", "err", err)
	}
	if err := c.Close(); err != nil {
		r.logger.Warn("closing kafka consumer", "err", err)
	}
	stopStats()
	statsDone.Wait()
	r.logger.Info("consumer stopped")
	return runErr
}

func (r *Runtime) loop(ctx context.Context, c *kafka.Consumer) error {
	lagTick := time.NewTicker(time.Second)
	defer lagTick.Stop()
	for ctx.Err() == nil {
		if err := r.dlq.Fatal(); err != nil {
			// The idempotent producer cannot go on; a new process (the
			// supervisor restarts it) gets a new one and redelivers what
			// was not dead-lettered.
			return err
		}
		if err := r.workerErr.Load(); err != nil {
			return *err
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				r.logger.Warn("kafka consume error", "err", e.TopicPartition.Error)
				continue
			}
			if p := r.parts[keyOf(e.TopicPartition)]; p != nil {
				p.push(e)
			}
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("kafka consumer: %w", e)
			}
			r.logger.Warn("kafka consumer error", "err", e)
		case kafka.OffsetsCommitted:
			if e.Error != nil && !isNoOffset(e.Error) {
				r.logger.Warn("committing offsets", "err", e.Error)
			}
		}
		r.reconcilePauses(c)
		select {
		case <-lagTick.C:
			r.updateLag(c)
		default:
		}
	}
	return nil
}

// reconcilePauses pauses the partitions whose worker is retrying or whose
// queue is full, and resumes them when that is over. Pausing stops fetching
// only for that partition; the loop keeps polling, so the group membership
// (max.poll.interval.ms) never lapses.
func (r *Runtime) reconcilePauses(c *kafka.Consumer) {
	for _, p := range r.parts {
		want := p.wantPause(r.opts.QueueSize, r.opts.QueueBytes)
		if want == p.paused {
			continue
		}
		tps := []kafka.TopicPartition{p.tp()}
		var err error
		if want {
			err = c.Pause(tps)
		} else {
			err = c.Resume(tps)
		}
		if err != nil {
			r.logger.Warn("pausing or resuming partition", "topic", p.topic, "partition", p.id, "pause", want, "err", err)
			continue
		}
		p.paused = want
		r.logger.Debug("partition fetch toggled", "topic", p.topic, "partition", p.id, "paused", want)
	}
}

// rebalance runs on the poll goroutine. On assignment it starts a worker per
// partition; on revocation it stops the partitions' workers (an in-flight
// transaction finishes and stores its offset), then commits the stored
// offsets, so the next owner starts right after the last finished record.
// A lost assignment commits nothing: another member may own the partitions.
func (r *Runtime) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if err := c.IncrementalAssign(e.Partitions); err != nil {
			return fmt.Errorf("assigning partitions: %w", err)
		}
		// librdkafka keeps a partition paused across reassignment.
		_ = c.Resume(e.Partitions)
		committed, err := c.Committed(e.Partitions, 5000)
		if err != nil {
			r.logger.Debug("reading committed offsets", "err", err)
		}
		for _, tp := range e.Partitions {
			p := newPartition(tp)
			for _, ctp := range committed {
				if keyOf(ctp) == keyOf(tp) && ctp.Offset >= 0 {
					p.next.Store(int64(ctp.Offset))
				}
			}
			r.parts[keyOf(tp)] = p
			go r.work(p)
		}
		r.logger.Info("partitions assigned", "partitions", partitionList(e.Partitions))
	case kafka.RevokedPartitions:
		lost := c.AssignmentLost()
		r.logger.Info("partitions revoked", "partitions", partitionList(e.Partitions), "lost", lost)
		for _, tp := range e.Partitions {
			if p := r.parts[keyOf(tp)]; p != nil {
				p.stop()
			}
		}
		for _, tp := range e.Partitions {
			if p := r.parts[keyOf(tp)]; p != nil {
				<-p.done
				delete(r.parts, keyOf(tp))
				lagGauge.DeleteLabelValues(r.opts.Name, strconv.Itoa(int(tp.Partition)))
			}
		}
		if !lost {
			if _, err := c.Commit(); err != nil && !isNoOffset(err) {
				r.logger.Warn("committing offsets on revoke", "err", err)
			}
		}
		if err := c.IncrementalUnassign(e.Partitions); err != nil {
			return fmt.Errorf("unassigning partitions: %w", err)
		}
	}
	if r.opts.OnAssignment != nil {
		r.opts.OnAssignment(len(r.parts))
	}
	return nil
}

// stopAll stops every worker and waits for them.
func (r *Runtime) stopAll() {
	for _, p := range r.parts {
		p.stop()
	}
	for k, p := range r.parts {
		<-p.done
		delete(r.parts, k)
		lagGauge.DeleteLabelValues(r.opts.Name, strconv.Itoa(int(p.id)))
	}
}

// updateLag sets eventforge_consumer_lag from the cached high watermarks.
func (r *Runtime) updateLag(c *kafka.Consumer) {
	lag := map[int32]int64{}
	for _, p := range r.parts {
		low, high, err := c.GetWatermarkOffsets(p.topic, p.id)
		if err != nil || high < 0 {
			continue
		}
		next := p.next.Load()
		if next < 0 {
			next = max(low, 0)
		}
		lag[p.id] += max(high-next, 0)
	}
	for id, l := range lag {
		lagGauge.WithLabelValues(r.opts.Name, strconv.Itoa(int(id))).Set(float64(l))
	}
}

type partKey struct {
	topic string
	id    int32
}

func keyOf(tp kafka.TopicPartition) partKey {
	k := partKey{id: tp.Partition}
	if tp.Topic != nil {
		k.topic = *tp.Topic
	}
	return k
}

func partitionList(tps []kafka.TopicPartition) []string {
	out := make([]string, 0, len(tps))
	for _, tp := range tps {
		k := keyOf(tp)
		out = append(out, k.topic+"["+strconv.Itoa(int(k.id))+"]")
	}
	return out
}

func isNoOffset(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Code() == kafka.ErrNoOffset
}
