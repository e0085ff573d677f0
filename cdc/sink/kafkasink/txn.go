package kafkasink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/tracing"
)

// Exactly-once into Kafka.
//
// TxnPublisher is a transactional producer: the relay's records and the
// position they reach (a record on the compacted position topic, keyed by
// the relay) are written in one Kafka transaction, so "published" and
// "position recorded" are one fact for a read_committed reader. Its
// transactional.id is the relay's own and stable: opening a TxnPublisher
// (InitTransactions) fences every older producer with that ID — an isolated
// old leader's transaction is aborted and nothing it sends afterwards
// becomes visible.
//
// A record that fails (Kafka refuses its batch, a delivery times out) fails
// the whole transaction: it is aborted, every record of it reported failed,
// and the relay resumes from the last committed position. Aborted records
// may sit in the log, invisible to read_committed readers, so a message
// timeout no longer threatens the order those readers see: the message
// timeout is the transaction timeout, and a Kafka outage longer than it
// aborts and retries the transaction instead of waiting forever.

// ErrAborted is the outcome of a record whose transaction was aborted.
var ErrAborted = errors.New("not stored: its transaction was aborted")

// TxnOptions configure a TxnPublisher.
type TxnOptions struct {
	Bootstrap string
	ClientID  string
	// TransactionalID is the relay's stable transactional.id.
	TransactionalID string
	// PositionTopic and PositionKey locate the position record.
	PositionTopic, PositionKey string
	// Timeout is the transaction timeout (and the message timeout).
	Timeout time.Duration
	// Extra librdkafka settings applied last.
	Extra kafka.ConfigMap
}

// txnRecord is a record of the open transaction.
type txnRecord struct {
	opaque any
	err    error // its delivery report's error
	done   bool  // its delivery report arrived
}

// TxnPublisher is a transactional Kafka producer (sink.Transactional).
type TxnPublisher struct {
	producer   *kafka.Producer
	opts       TxnOptions
	logger     *slog.Logger
	logs       chan kafka.LogEvent
	onDelivery sink.DeliveryFunc
	fatal      chan error
	done       chan struct{}

	mu       sync.Mutex
	open     bool // a transaction began
	records  []*txnRecord
	reported int           // delivery reports of the open transaction
	settled  chan struct{} // a delivery report arrived
}

// NewTxn creates the producer, fences every older producer of its
// transactional ID and starts its delivery-report loop.
func NewTxn(ctx context.Context, opts TxnOptions, logger *slog.Logger, onDelivery sink.DeliveryFunc) (*TxnPublisher, error) {
	logs := make(chan kafka.LogEvent, 128)
	cfg := kafkaconf.Base(opts.Bootstrap, opts.ClientID, logs)
	timeout := int(opts.Timeout / time.Millisecond)
	for k, v := range (kafka.ConfigMap{
		"enable.idempotence":        true,
		"transactional.id":          opts.TransactionalID,
		"transaction.timeout.ms":    timeout,
		"message.timeout.ms":        timeout,
		"partitioner":               "consistent_random",
		"acks":                      "all",
		"linger.ms":                 5,
		"compression.type":          "lz4",
		"go.delivery.report.fields": "none",
	}) {
		cfg[k] = v
	}
	for k, v := range opts.Extra {
		if k != "message.timeout.ms" {
			cfg[k] = v
		}
	}
	p, err := kafka.NewProducer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating transactional kafka producer: %w", err)
	}
	t := &TxnPublisher{producer: p, opts: opts, logger: logger, logs: logs, onDelivery: onDelivery,
		fatal: make(chan error, 1), done: make(chan struct{}), settled: make(chan struct{}, 1)}
	go kafkaconf.BridgeLogs(logs, logger)
	go t.deliveries()
	if err := p.InitTransactions(ctx); err != nil {
		p.Close()
		<-t.done
		close(logs)
		return nil, fmt.Errorf("initialising transactions of %s (fencing older producers): %w", opts.TransactionalID, err)
	}
	return t, nil
}

// Fatal implements sink.Sink.
func (t *TxnPublisher) Fatal() <-chan error { return t.fatal }

// deliveries notes each delivery report against the open transaction.
func (t *TxnPublisher) deliveries() {
	defer close(t.done)
	for e := range t.producer.Events() {
		switch ev := e.(type) {
		case *kafka.Message:
			rec, ok := tracing.EndPublish(ev.Opaque, ev.TopicPartition.Error).(*txnRecord)
			t.mu.Lock()
			if ok {
				rec.err, rec.done = ev.TopicPartition.Error, true
			}
			t.reported++
			t.mu.Unlock()
			select {
			case t.settled <- struct{}{}:
			default:
			}
		case kafka.Error:
			if ev.IsFatal() {
				select {
				case t.fatal <- ev:
				default:
				}
				t.logger.Error("kafka producer fatal error", "err", ev)
				continue
			}
			t.logger.Warn("kafka producer error", "err", ev, "retriable", ev.IsRetriable())
		}
	}
}

// Publish implements sink.Sink: it hands ev to Kafka in the open
// transaction, beginning one if none is open.
func (t *TxnPublisher) Publish(ctx context.Context, ev *decode.Event, dest string, _, opaque any) error {
	if err := t.begin(); err != nil {
		return err
	}
	msg := Record(ev, dest)
	rec := &txnRecord{opaque: opaque}
	msg.Opaque = rec
	t.mu.Lock()
	t.records = append(t.records, rec)
	t.mu.Unlock()
	if err := t.produce(ctx, msg); err != nil {
		t.mu.Lock()
		t.records = t.records[:len(t.records)-1]
		t.mu.Unlock()
		return fmt.Errorf("producing event %s: %w", ev.ID, err)
	}
	return nil
}

// begin begins a transaction unless one is open.
func (t *TxnPublisher) begin() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		return nil
	}
	if err := t.producer.BeginTransaction(); err != nil {
		return fmt.Errorf("beginning a kafka transaction: %w", err)
	}
	t.open, t.reported = true, 0
	return nil
}

// produce hands msg to librdkafka, waiting while its queue is full.
func (t *TxnPublisher) produce(ctx context.Context, msg *kafka.Message) error {
	tracing.StartPublish(ctx, msg)
	for {
		err := t.producer.Produce(msg, nil)
		var kerr kafka.Error
		if err == nil || !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			if err != nil {
				tracing.EndPublish(msg.Opaque, err)
			}
			return err
		}
		select {
		case <-ctx.Done():
			tracing.EndPublish(msg.Opaque, ctx.Err())
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Commit implements sink.Transactional: the position record is produced
// last, every record's delivery awaited, and the transaction committed —
// or aborted when any record failed.
func (t *TxnPublisher) Commit(ctx context.Context, pos sink.Position) error {
	t.mu.Lock()
	open := t.open
	t.mu.Unlock()
	if !open {
		return nil
	}
	value, _ := json.Marshal(pos)
	topic := t.opts.PositionTopic
	posRec := &txnRecord{}
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key: []byte(t.opts.PositionKey), Value: value, Opaque: posRec}
	if err := t.produce(ctx, msg); err != nil {
		return t.abort(ctx, fmt.Errorf("producing the position record: %w", err))
	}
	if err := t.awaitReports(ctx, posRec); err != nil {
		return t.abort(ctx, err)
	}
	if err := t.commitTransaction(ctx); err != nil {
		return t.abort(ctx, err)
	}
	t.mu.Lock()
	records := t.records
	t.records, t.open = nil, false
	t.mu.Unlock()
	for _, r := range records {
		t.onDelivery(r.opaque, nil)
	}
	return nil
}

// awaitReports waits for the delivery report of every record of the open
// transaction and of pos, and returns the first failure.
func (t *TxnPublisher) awaitReports(ctx context.Context, pos *txnRecord) error {
	for {
		t.mu.Lock()
		all, failed := pos.done, pos.err
		for _, r := range t.records {
			all = all && r.done
			if failed == nil && r.err != nil {
				failed = r.err
			}
		}
		t.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case all:
			return nil
		}
		t.producer.Flush(10)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.settled:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// commitTransaction commits, retrying what librdkafka says may be retried.
func (t *TxnPublisher) commitTransaction(ctx context.Context) error {
	for {
		err := t.producer.CommitTransaction(ctx)
		var kerr kafka.Error
		if err == nil || !errors.As(err, &kerr) || !kerr.IsRetriable() || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("committing the kafka transaction: %w", err)
			}
			return nil
		}
	}
}

// abort aborts the open transaction, reports each of its records failed —
// with its own delivery error, else ErrAborted — and returns cause.
func (t *TxnPublisher) abort(ctx context.Context, cause error) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	if err := t.producer.AbortTransaction(actx); err != nil {
		t.logger.Warn("aborting the kafka transaction", "err", err)
	}
	t.mu.Lock()
	records := t.records
	errs := make([]error, len(records))
	for i, r := range records {
		errs[i] = r.err
		if errs[i] == nil {
			errs[i] = ErrAborted
		}
	}
	t.records, t.open = nil, false
	t.mu.Unlock()
	for i, r := range records {
		t.onDelivery(r.opaque, errs[i])
	}
	return cause
}

// Close implements sink.Sink: an open transaction is aborted (its records
// reported failed), then the producer closes. It returns how many records
// the aborted transaction held.
func (t *TxnPublisher) Close(timeout time.Duration) int {
	t.mu.Lock()
	left := len(t.records)
	open := t.open
	t.mu.Unlock()
	if open {
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
		_ = t.abort(ctx, nil)
		cancel()
	}
	_ = t.producer.Purge(kafka.PurgeQueue | kafka.PurgeInFlight | kafka.PurgeNonBlocking)
	t.producer.Flush(int(purgeReportWait / time.Millisecond))
	t.producer.Close()
	<-t.done
	close(t.logs)
	return left
}
