// Package kafkasink is the relay's Kafka sink: an idempotent producer
// (acks=all) that keeps each key's records in call order whatever Kafka
// refuses (order.go), turns an outbox event into its record (record.go) and
// tells a record Kafka refuses for good from a failure worth retrying
// (classify.go). Driver opens it for the relay (driver.go).
package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/tracing"
)

// Publisher wraps an idempotent Kafka producer and keeps each key's records
// in call order across groups (order.go).
type Publisher struct {
	producer   *kafka.Producer
	logger     *slog.Logger
	logs       chan kafka.LogEvent
	onDelivery sink.DeliveryFunc
	gate       *gate
	// failures carries records that failed without reaching librdkafka to
	// the delivery-report goroutine, which reports them.
	failures chan failure
	done     chan struct{} // the delivery-report goroutine ended
	stop     chan struct{} // closed by Close: the releaser stops
	released chan struct{} // the releaser ended
	fatal    chan error
	// stopped is set once a fatal error stopped the producer: nothing it
	// holds will be delivered, so Close does not wait for it.
	stopped atomic.Bool
}

// tracked is a record's opaque while the publisher holds it: the key it is
// ordered by and the caller's opaque.
type tracked struct {
	key    string
	opaque any
}

// failure is a record that failed before librdkafka had it.
type failure struct {
	msg *kafka.Message
	err error
}

// Options configure a Publisher.
type Options struct {
	Bootstrap string
	ClientID  string
	// Extra librdkafka settings applied last.
	Extra kafka.ConfigMap
}

// New creates the producer and starts its delivery-report loop, which calls
// onDelivery for each record. A fatal producer error is sent on Fatal().
func New(opts Options, logger *slog.Logger, onDelivery sink.DeliveryFunc) (*Publisher, error) {
	logs := make(chan kafka.LogEvent, 128)
	cfg := kafkaconf.Base(opts.Bootstrap, opts.ClientID, logs)
	producerSettings := kafka.ConfigMap{
		"enable.idempotence": true,
		// Every publisher partitions alike, so a replay puts an order's
		// record where the relay put its others: CRC-32 of the key
		// (librdkafka's default, written out so that it is never changed).
		"partitioner": "consistent_random",
		"acks":        "all",
		// An event waits at most 1 ms for others to share its request:
		// at a few hundred events/s the linger is most of an event's
		// latency (docs/cdc.md, "Latency"), and under a backlog batches
		// fill while earlier requests are in flight.
		"linger.ms":                 1,
		"compression.type":          "lz4",
		"go.delivery.report.fields": "none",
	}
	for k, v := range producerSettings {
		cfg[k] = v
	}
	for k, v := range opts.Extra {
		cfg[k] = v
	}
	p, err := kafka.NewProducer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating kafka producer: %w", err)
	}
	pub := &Publisher{
		producer: p, logger: logger, logs: logs, onDelivery: onDelivery,
		gate: newGate(), failures: make(chan failure, 64),
		done: make(chan struct{}), stop: make(chan struct{}), released: make(chan struct{}), fatal: make(chan error, 1),
	}
	go kafkaconf.BridgeLogs(logs, logger)
	go pub.deliveries()
	go pub.releaser()
	return pub, nil
}

// Fatal reports a fatal producer error (e.g. an idempotence sequence
// violation). After it, the producer is unusable and must be rebuilt; the
// caller must resume from the last confirmed LSN, never skip.
func (p *Publisher) Fatal() <-chan error { return p.fatal }

func (p *Publisher) deliveries() {
	defer close(p.done)
	events := p.producer.Events()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				p.reportFailures()
				return
			}
			switch ev := e.(type) {
			case *kafka.Message:
				p.settle(ev, ev.TopicPartition.Error)
			case kafka.Error:
				if ev.IsFatal() {
					p.stopped.Store(true)
					select {
					case p.fatal <- ev:
					default:
					}
					p.logger.Error("kafka producer fatal error", "err", ev)
					continue
				}
				p.logger.Warn("kafka producer error", "err", ev, "retriable", ev.IsRetriable())
			}
		case f := <-p.failures:
			p.settle(f.msg, f.err)
		}
	}
}

// reportFailures reports the failures still queued when the producer closed.
func (p *Publisher) reportFailures() {
	for {
		select {
		case f := <-p.failures:
			p.settle(f.msg, f.err)
		default:
			return
		}
	}
}

// settle reports a record's outcome, and fails the records of its key that
// waited behind it when it failed. Only the delivery-report goroutine calls
// it.
func (p *Publisher) settle(msg *kafka.Message, err error) {
	t := tracing.EndPublish(msg.Opaque, err).(*tracked)
	behind := p.gate.settle(t.key, err)
	p.onDelivery(t.opaque, err)
	for _, m := range behind {
		p.onDelivery(tracing.EndPublish(m.Opaque, ErrEarlierFailed).(*tracked).opaque, ErrEarlierFailed)
	}
}

// releaser produces the records the gate lets go once their key's earlier
// records are acknowledged.
func (p *Publisher) releaser() {
	defer close(p.released)
	for {
		select {
		case <-p.stop:
			return
		case <-p.gate.wake:
		}
		for _, msg := range p.gate.release() {
			if err := p.produce(msg, p.stop); err != nil {
				// The delivery goroutine runs until Close has stopped
				// this one, so it takes the failure.
				p.failures <- failure{msg: msg, err: err}
			}
		}
	}
}

// produce hands msg to librdkafka, waiting while its queue is full until
// done is closed.
func (p *Publisher) produce(msg *kafka.Message, done <-chan struct{}) error {
	for {
		err := p.producer.Produce(msg, nil)
		var kerr kafka.Error
		if err == nil || !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			return err
		}
		select {
		case <-done:
			return kafka.NewError(kafka.ErrPurgeQueue, "publisher closed", false)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Publish hands ev to the producer for topic in group (the relay's group is
// its PostgreSQL transaction): Kafka gets it after every record of its key
// (aggregate ID) handed over earlier in another group, and nothing of that
// key once one of its records failed (order.go). It returns once the record
// is queued — in librdkafka or behind its key's earlier records; the
// outcome arrives through the DeliveryFunc with opaque. When librdkafka's
// queue is full it waits for room, so a slow broker slows the caller down.
func (p *Publisher) Publish(ctx context.Context, ev *decode.Event, topic string, group, opaque any) error {
	msg := Record(ev, topic)
	msg.Opaque = &tracked{key: ev.AggregateID, opaque: opaque}
	tracing.StartPublish(ctx, msg) // span until the ack; the record's traceparent names it
	switch p.gate.admit(ev.AggregateID, group, msg) {
	case held:
		return nil
	case refused:
		tracing.EndPublish(msg.Opaque, ErrEarlierFailed)
		return fmt.Errorf("producing event %s: %w", ev.ID, ErrEarlierFailed)
	}
	err := p.produce(msg, ctx.Done())
	if err == nil {
		return nil
	}
	tracing.EndPublish(msg.Opaque, err)
	for _, m := range p.gate.settle(ev.AggregateID, err) {
		p.failures <- failure{msg: m, err: ErrEarlierFailed}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("producing event %s: %w", ev.ID, err)
}

// Close waits up to timeout for queued records to be delivered (their
// outcomes still reach the DeliveryFunc; not at all after a fatal error),
// purges what is left — queued, in flight, and held behind earlier records
// of their key, so a producer whose records never time out still closes
// while Kafka is unreachable — then closes the producer and returns how
// many records were left undelivered. A purged record is reported as
// failed; it may still have reached the broker (a duplicate, never a loss).
func (p *Publisher) Close(timeout time.Duration) int {
	if p.stopped.Load() {
		timeout = 0
	}
	deadline := time.Now().Add(timeout)
	left := 0
	for {
		wait := max(time.Until(deadline), 0)
		left = p.producer.Flush(int(min(wait, 100*time.Millisecond) / time.Millisecond))
		held := p.gate.holding()
		if (left == 0 && held == 0) || wait == 0 {
			left += held
			break
		}
	}
	close(p.stop)
	<-p.released
	if left > 0 {
		if err := p.producer.Purge(kafka.PurgeQueue | kafka.PurgeInFlight | kafka.PurgeNonBlocking); err != nil {
			p.logger.Warn("purging undelivered records", "err", err)
		}
		// Serve the purged records' delivery reports.
		p.producer.Flush(int(purgeReportWait / time.Millisecond))
	}
	p.producer.Close()
	<-p.done
	close(p.logs)
	purged := kafka.NewError(kafka.ErrPurgeQueue, "purged at close: held behind an earlier record of its key", false)
	for _, m := range p.gate.drop() {
		p.onDelivery(tracing.EndPublish(m.Opaque, purged).(*tracked).opaque, purged)
	}
	return left
}

// purgeReportWait bounds how long Close serves the delivery reports of
// purged records.
const purgeReportWait = time.Second
