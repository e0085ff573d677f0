package dlq

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Producer is the one Kafka producer that writes on the DLQ's behalf: the
// consumer engine's dead-letter copies (Write) and the replays of `eventforge
// dlq replay` and the console (Replayer) go out through it. It is idempotent
// with acks=all, so a record it retries is written once and in order. A
// fatal producer error (kafka.Error.IsFatal: the idempotent producer can no
// longer guarantee order or no duplicates) is kept: Fatal returns it and
// every later Write fails with it.
type Producer struct {
	producer *kafka.Producer
	logger   *slog.Logger
	done     chan struct{}

	fatalOnce sync.Once
	fatalErr  atomic.Pointer[error]
}

// NewProducer creates a Producer from cfg, a client configuration built by
// package kafkaconf (Base for a component, whose librdkafka logs it
// bridges; Tool, as ReplayConfig, for an operator command), to which it
// adds idempotence, acks=all and small Go channels. Producer errors other
// than fatal ones are logged to logger; with a nil logger they are not.
func NewProducer(cfg kafka.ConfigMap, logger *slog.Logger) (*Producer, error) {
	cfg = maps.Clone(cfg) // the caller's map is left as it was
	cfg["enable.idempotence"] = true
	cfg["acks"] = "all"
	// Records go out through Produce, and Events() carries only errors,
	// drained at once (drain): the Go client's default channels of
	// 1,000,000 slots each (Go heap, which the collector's heap goal
	// doubles) are never used.
	cfg["go.produce.channel.size"] = 16
	cfg["go.events.channel.size"] = 64
	p, err := kafka.NewProducer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dlq producer: %w", err)
	}
	d := &Producer{producer: p, logger: logger, done: make(chan struct{})}
	go d.drain()
	return d, nil
}

// ReplayConfig is the client configuration of the replays' Producer in an
// operator command or the console: built by kafkaconf.Tool, so the
// --kafka-* TLS and SASL settings apply.
func ReplayConfig(bootstrap string) kafka.ConfigMap {
	return kafkaconf.Tool(bootstrap, "eventforge-dlq-replay")
}

// drain consumes the producer's events channel (delivery reports go to
// per-record channels); an unread channel would stall the producer.
func (d *Producer) drain() {
	defer close(d.done)
	for ev := range d.producer.Events() {
		if e, ok := ev.(kafka.Error); ok {
			if e.IsFatal() {
				d.setFatal(e)
				continue
			}
			if d.logger != nil {
				d.logger.Warn("dlq producer error", "err", e)
			}
		}
	}
}

// setFatal records the first fatal error of the producer.
func (d *Producer) setFatal(err error) {
	d.fatalOnce.Do(func() {
		err = fmt.Errorf("dlq producer: %w", err)
		d.fatalErr.Store(&err)
	})
}

// Fatal returns the producer's fatal error, or nil while it is usable.
func (d *Producer) Fatal() error {
	if p := d.fatalErr.Load(); p != nil {
		return *p
	}
	return nil
}

// checkFatal records the producer's fatal error when err is one (or a
// delivery failed because of one) and returns err.
func (d *Producer) checkFatal(err error) error {
	var kerr kafka.Error
	if !errors.As(err, &kerr) || (!kerr.IsFatal() && kerr.Code() != kafka.ErrFatal) {
		return err
	}
	if ferr := d.producer.GetFatalError(); ferr != nil {
		d.setFatal(ferr)
	} else {
		d.setFatal(kerr)
	}
	return err
}

// Write produces rec and waits for the broker's acknowledgement, or its
// failure, which comes within the configuration's message.timeout.ms. It
// fails at once after a fatal producer error.
func (d *Producer) Write(rec *kafka.Message) error {
	if err := d.Fatal(); err != nil {
		return err
	}
	delivery := make(chan kafka.Event, 1)
	if err := d.producer.Produce(rec, delivery); err != nil {
		return d.checkFatal(fmt.Errorf("producing to %s: %w", *rec.TopicPartition.Topic, err))
	}
	ev := <-delivery
	m, ok := ev.(*kafka.Message)
	if !ok {
		return fmt.Errorf("producing to %s: unexpected delivery event %v", *rec.TopicPartition.Topic, ev)
	}
	if m.TopicPartition.Error != nil {
		return d.checkFatal(fmt.Errorf("producing to %s: %w", *rec.TopicPartition.Topic, m.TopicPartition.Error))
	}
	return nil
}

// Kafka returns the underlying producer, e.g. for an admin client on its
// connections (kafka.NewAdminClientFromProducer).
func (d *Producer) Kafka() *kafka.Producer { return d.producer }

// Close waits up to 5 seconds for records not yet acknowledged, then
// closes the producer.
func (d *Producer) Close() {
	d.producer.Flush(5000)
	d.producer.Close()
	<-d.done
}
