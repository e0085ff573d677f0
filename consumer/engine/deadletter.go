package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// dlqMessageMaxBytes is the DLQ producer's message.max.bytes: the broker's
// default socket.request.max.bytes less room for the request around it.
const dlqMessageMaxBytes = 100_000_000

// newDeadLetterer returns the DLQ producer (dlq.Producer) of a runtime,
// with the dead letters' settings on top of the component's client
// configuration, once the DLQ topic of every source topic is as
// ensureDLQTopics wants it. Its Write waits for each acknowledgement, or
// the failure that comes within dlqDeliveryTimeout; it waits for the
// outcome even when the partition is revoked meanwhile, so that a copy the
// DLQ acknowledged has its source offset stored before the partition goes,
// and the next owner does not apply an event that was dead-lettered too.
func newDeadLetterer(ctx context.Context, opts Options, logs chan kafka.LogEvent, logger *slog.Logger) (*dlq.Producer, error) {
	cfg := kafkaconf.Base(opts.Bootstrap, "eventforge-"+opts.Name+"-dlq", logs)
	cfg["linger.ms"] = 0
	// A dead-letter copy is its source record plus the dlq.* headers; the
	// DLQ topic's own max.message.bytes (dlq.MessageHeadroom above its
	// source's) is the bound that matters, not librdkafka's default of
	// 1,000,000 bytes, which is below Kafka's default topic limit.
	cfg["message.max.bytes"] = dlqMessageMaxBytes
	// A write that cannot succeed (topic missing, no broker) fails within
	// this, so the partition is counted as waiting on the DLQ soon; the
	// default is 5 minutes.
	cfg["message.timeout.ms"] = int(dlqDeliveryTimeout / time.Millisecond)
	d, err := dlq.NewProducer(cfg, logger)
	if err != nil {
		return nil, err
	}
	if err := ensureDLQTopics(ctx, d.Kafka(), opts, logger); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// dlqDeliveryTimeout bounds one DLQ write (message.timeout.ms).
const dlqDeliveryTimeout = 30 * time.Second

// ensureDLQTopics makes sure the DLQ topic of every source topic exists
// with settings under which its records never expire (dlq.EnsureTopics),
// creating or altering it; it fails, and the consumer does not start, when
// that is not possible. Kafka not answering is not such a case: the
// consumer waits for it (a consumer started during a broker outage would
// otherwise exit, and its supervisor restart it in a loop).
func ensureDLQTopics(ctx context.Context, p *kafka.Producer, opts Options, logger *slog.Logger) error {
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer a.Close()
	var changes []string
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		changes, err = dlq.EnsureTopics(actx, a, opts.Topics, opts.DLQSuffix)
		cancel()
		if err == nil || ctx.Err() != nil || !kafkaUnreachable(err) {
			break
		}
		logger.Warn("kafka does not answer; waiting for it to check the dlq topics", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		return err
	}
	for _, c := range changes {
		logger.Warn("dlq topic setting changed so that dead letters never expire", "change", c)
	}
	return nil
}

// kafkaUnreachable reports whether err says only that Kafka did not answer
// in time.
func kafkaUnreachable(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr.Code() {
		case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrTimedOut, kafka.ErrTimedOutQueue, kafka.ErrRequestTimedOut, kafka.ErrNetworkException:
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded)
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
	a, err := kafka.NewAdminClientFromConsumer(c)
	if err != nil {
		r.logger.Warn("creating dlq stats admin client", "err", err)
		return
	}
	defer a.Close()
	for {
		for _, src := range r.opts.Topics {
			topic := dlq.Topic(src, r.opts.DLQSuffix)
			r.checkExpiry(ctx, a, topic)
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

// checkExpiry sets eventforge_dlq_expiring for topic: 1 when the topic is
// missing or its settings (altered since the consumer started, which set
// them) let records be deleted without a purge, 0 otherwise.
func (r *Runtime) checkExpiry(ctx context.Context, a *kafka.AdminClient, topic string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	settings, err := dlq.ReadSettings(ctx, a, topic)
	switch {
	case errors.Is(err, dlq.ErrNoTopic):
		dlqExpiring.WithLabelValues(topic).Set(1)
	case err != nil:
		r.logger.Debug("reading dlq topic settings", "dlq_topic", topic, "err", err)
	case len(dlq.Expiry(settings[topic])) > 0:
		dlqExpiring.WithLabelValues(topic).Set(1)
		r.logger.Warn("dlq topic lets dead letters expire", "dlq_topic", topic, "settings", dlq.Expiry(settings[topic]))
	default:
		dlqExpiring.WithLabelValues(topic).Set(0)
	}
}

// Causes of eventforge_consumer_dlq_unavailable_partitions: why a
// partition's dead letter cannot be written.
const (
	// CauseTopicMissing: the DLQ topic does not exist (deleted; consumers
	// create it at start and the broker should not auto-create it).
	CauseTopicMissing = "topic_missing"
	// CauseNotAuthorized: the broker refuses the consumer's writes to it.
	CauseNotAuthorized = "not_authorized"
	// CauseTooLarge: the copy exceeds the DLQ topic's max.message.bytes,
	// even with its failure message capped.
	CauseTooLarge = "too_large"
	// CauseWriteFailed: any other failed write (e.g. no broker answered
	// within the delivery timeout).
	CauseWriteFailed = "write_failed"
)

// dlqWriteCauses lists every cause, for the gauge's series.
var dlqWriteCauses = []string{CauseTopicMissing, CauseNotAuthorized, CauseTooLarge, CauseWriteFailed}

// dlqWriteCause names why a DLQ write failed, by its Kafka error code.
func dlqWriteCause(err error) string {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return CauseWriteFailed
	}
	switch kerr.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		return CauseTopicMissing
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed:
		return CauseNotAuthorized
	case kafka.ErrMsgSizeTooLarge, kafka.ErrInvalidMsgSize, kafka.ErrRecordListTooLarge:
		return CauseTooLarge
	}
	return CauseWriteFailed
}

// setDLQUnavailable records why p's dead letter cannot be written (cause)
// or that nothing waits for the DLQ (""), in
// eventforge_consumer_dlq_unavailable_partitions. Only p's worker calls it.
func (r *Runtime) setDLQUnavailable(p *partition, cause string) {
	if p.dlqCause == cause {
		return
	}
	if p.dlqCause != "" {
		dlqUnavailablePartitions.WithLabelValues(r.opts.Name, p.dlqCause).Dec()
	}
	if cause != "" {
		dlqUnavailablePartitions.WithLabelValues(r.opts.Name, cause).Inc()
	}
	p.dlqCause = cause
}
