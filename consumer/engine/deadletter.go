package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// deadLetterer writes DLQ records with an idempotent producer and waits for
// each acknowledgement. A fatal producer error (kafka.Error.IsFatal: the
// idempotent producer can no longer guarantee order or no duplicates) is
// kept: every later write fails with it, and Run ends with it.
type deadLetterer struct {
	producer *kafka.Producer
	logger   *slog.Logger
	done     chan struct{}

	fatalOnce sync.Once
	fatalErr  atomic.Pointer[error]
}

func newDeadLetterer(ctx context.Context, opts Options, logs chan kafka.LogEvent, logger *slog.Logger) (*deadLetterer, error) {
	cfg := kafkaconf.Base(opts.Bootstrap, "eventforge-"+opts.Name+"-dlq", logs)
	cfg["enable.idempotence"] = true
	cfg["acks"] = "all"
	cfg["linger.ms"] = 0
	// Dead letters go out one at a time through Produce; the Go produce
	// channel (1,000,000 slots by default, ~23 MiB) is never used.
	cfg["go.produce.channel.size"] = 16
	// Events() carries only errors and is drained at once (drain); its
	// default of 1,000,000 slots is 16 MiB of Go heap that the garbage
	// collector's heap goal doubles.
	cfg["go.events.channel.size"] = 64
	p, err := kafka.NewProducer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dlq producer: %w", err)
	}
	d := &deadLetterer{producer: p, logger: logger, done: make(chan struct{})}
	go d.drain()
	if err := ensureDLQTopics(ctx, p, opts); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// drain consumes the producer's events channel (delivery reports go to
// per-record channels); an unread channel would stall the producer.
func (d *deadLetterer) drain() {
	defer close(d.done)
	for ev := range d.producer.Events() {
		if e, ok := ev.(kafka.Error); ok {
			if e.IsFatal() {
				d.setFatal(e)
				continue
			}
			d.logger.Warn("dlq producer error", "err", e)
		}
	}
}

// setFatal records the first fatal error of the producer.
func (d *deadLetterer) setFatal(err error) {
	d.fatalOnce.Do(func() {
		err = fmt.Errorf("dlq producer: %w", err)
		d.fatalErr.Store(&err)
	})
}

// fatal returns the producer's fatal error, or nil while it is usable.
func (d *deadLetterer) fatal() error {
	if p := d.fatalErr.Load(); p != nil {
		return *p
	}
	return nil
}

// checkFatal records the producer's fatal error when err is one (or a
// delivery failed because of one) and returns err.
func (d *deadLetterer) checkFatal(err error) error {
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

// write produces rec and waits for the broker's acknowledgement. It fails
// at once after a fatal producer error.
func (d *deadLetterer) write(ctx context.Context, rec *kafka.Message) error {
	if err := d.fatal(); err != nil {
		return err
	}
	delivery := make(chan kafka.Event, 1)
	if err := d.producer.Produce(rec, delivery); err != nil {
		return d.checkFatal(fmt.Errorf("producing to %s: %w", *rec.TopicPartition.Topic, err))
	}
	select {
	case ev := <-delivery:
		m, ok := ev.(*kafka.Message)
		if !ok {
			return fmt.Errorf("producing to %s: unexpected delivery event %v", *rec.TopicPartition.Topic, ev)
		}
		if m.TopicPartition.Error != nil {
			return d.checkFatal(fmt.Errorf("producing to %s: %w", *rec.TopicPartition.Topic, m.TopicPartition.Error))
		}
		return nil
	case <-ctx.Done():
		// The record may still be delivered: at worst a duplicate DLQ record
		// when the source record is dead-lettered again by its next owner.
		return ctx.Err()
	}
}

func (d *deadLetterer) close() {
	d.producer.Flush(5000)
	d.producer.Close()
	<-d.done
}

// ensureDLQTopics creates the DLQ topic of every source topic that lacks
// one, with the source's partition count and the broker's default
// replication factor.
func ensureDLQTopics(ctx context.Context, p *kafka.Producer, opts Options) error {
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	desc, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(opts.Topics))
	if err != nil {
		return fmt.Errorf("describing topics %v: %w", opts.Topics, err)
	}
	var specs []kafka.TopicSpecification
	for _, t := range desc.TopicDescriptions {
		if t.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("describing topic %s: %w", t.Name, t.Error)
		}
		specs = append(specs, kafka.TopicSpecification{
			Topic: dlq.Topic(t.Name, opts.DLQSuffix), NumPartitions: len(t.Partitions), ReplicationFactor: -1,
		})
	}
	res, err := a.CreateTopics(ctx, specs)
	if err != nil {
		return fmt.Errorf("creating dlq topics: %w", err)
	}
	var errs []error
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
			errs = append(errs, fmt.Errorf("creating dlq topic %s: %w", r.Topic, r.Error))
		}
	}
	return errors.Join(errs...)
}

// dlqStats refreshes eventforge_dlq_events and
// eventforge_dlq_oldest_age_seconds for the DLQ topics of the consumed
// topics until ctx ends.
func (r *Runtime) dlqStats(ctx context.Context, logs chan kafka.LogEvent) {
	cfg := kafkaconf.Base(r.opts.Bootstrap, "eventforge-"+r.opts.Name+"-dlq-stats", logs)
	cfg["group.id"] = "eventforge-dlq-stats" // required by librdkafka; never joined (Assign, no commits)
	cfg["enable.auto.commit"] = false
	for k, v := range dlq.ReaderSettings {
		cfg[k] = v
	}
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		r.logger.Warn("creating dlq stats reader", "err", err)
		return
	}
	defer c.Close()
	for {
		for _, src := range r.opts.Topics {
			topic := dlq.Topic(src, r.opts.DLQSuffix)
			st, err := dlq.ReadStats(ctx, c, topic)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.logger.Debug("reading dlq stats", "dlq_topic", topic, "err", err)
				continue
			}
			dlqEvents.WithLabelValues(topic).Set(float64(st.Count))
			age := 0.0
			if !st.Oldest.IsZero() {
				age = max(time.Since(st.Oldest).Seconds(), 0)
			}
			dlqOldestAge.WithLabelValues(topic).Set(age)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.opts.DLQStatsInterval):
		}
	}
}
