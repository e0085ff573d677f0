// Package publish produces outbox events to Kafka with an idempotent
// producer and reports every delivery back to the caller.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/tracing"
)

// DeliveryFunc receives the outcome of one Publish call: err is nil once Kafka
// acknowledged the record (acks=all). It is called from one goroutine, in the
// order librdkafka reports deliveries.
type DeliveryFunc func(opaque any, err error)

// Publisher wraps an idempotent Kafka producer.
type Publisher struct {
	producer *kafka.Producer
	router   Router
	logger   *slog.Logger
	logs     chan kafka.LogEvent
	done     chan struct{}
	fatal    chan error
}

// Options configure a Publisher.
type Options struct {
	Bootstrap string
	ClientID  string
	Router    Router
	// Extra librdkafka settings applied last.
	Extra kafka.ConfigMap
}

// New creates the producer and starts its delivery-report loop, which calls
// onDelivery for each record. A fatal producer error is sent on Fatal().
func New(opts Options, logger *slog.Logger, onDelivery DeliveryFunc) (*Publisher, error) {
	logs := make(chan kafka.LogEvent, 128)
	cfg := kafkaconf.Base(opts.Bootstrap, opts.ClientID, logs)
	producerSettings := kafka.ConfigMap{
		"enable.idempotence":        true,
		"acks":                      "all",
		"linger.ms":                 5,
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
	pub := &Publisher{producer: p, router: opts.Router, logger: logger, logs: logs, done: make(chan struct{}), fatal: make(chan error, 1)}
	go kafkaconf.BridgeLogs(logs, logger)
	go pub.deliveries(onDelivery)
	return pub, nil
}

// Fatal reports a fatal producer error (e.g. an idempotence sequence
// violation). After it, the producer is unusable and must be rebuilt; the
// caller must resume from the last confirmed LSN, never skip.
func (p *Publisher) Fatal() <-chan error { return p.fatal }

func (p *Publisher) deliveries(onDelivery DeliveryFunc) {
	defer close(p.done)
	for e := range p.producer.Events() {
		switch ev := e.(type) {
		case *kafka.Message:
			onDelivery(tracing.EndPublish(ev.Opaque, ev.TopicPartition.Error), ev.TopicPartition.Error)
		case kafka.Error:
			if ev.IsFatal() {
				select {
				case p.fatal <- ev:
				default:
				}
				p.logger.Error("kafka producer fatal error", "err", ev)
				continue
			}
			p.logger.Warn("kafka producer error", "err", ev, "retriable", ev.IsRetriable())
		}
	}
}

// Publish hands ev to the producer. It returns once the record is queued;
// the outcome arrives through the DeliveryFunc with opaque. When the local
// queue is full it waits for room, so a slow broker slows the reader down.
func (p *Publisher) Publish(ctx context.Context, ev *decode.Event, opaque any) error {
	return p.PublishTo(ctx, ev, p.router.Topic(ev.AggregateType), opaque)
}

// PublishTo is Publish to topic instead of the routed one.
func (p *Publisher) PublishTo(ctx context.Context, ev *decode.Event, topic string, opaque any) error {
	msg := Record(ev, topic)
	msg.Opaque = opaque
	tracing.StartPublish(ctx, msg) // span until the ack; the record's traceparent names it
	for {
		err := p.producer.Produce(msg, nil)
		var kerr kafka.Error
		if err == nil {
			return nil
		}
		if !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			tracing.EndPublish(msg.Opaque, err)
			return fmt.Errorf("producing event %s: %w", ev.ID, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close waits up to timeout for queued records to be delivered (their
// outcomes still reach the DeliveryFunc), purges what is left — queued and
// in flight, so a producer whose records never time out still closes while
// Kafka is unreachable — then closes the producer and returns how many
// records were left undelivered. A purged record is reported as failed; it
// may still have reached the broker (a duplicate, never a loss).
func (p *Publisher) Close(timeout time.Duration) int {
	left := p.producer.Flush(int(timeout / time.Millisecond))
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
	return left
}

// purgeReportWait bounds how long Close serves the delivery reports of
// purged records.
const purgeReportWait = time.Second
