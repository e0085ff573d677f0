package kafkasink

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/sink"
)

// Config is the relay's Kafka settings, as `eventforge cdc` takes them.
type Config struct {
	// Brokers is the Kafka bootstrap server list.
	Brokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	// ProducerSettings are librdkafka properties for the relay's producer
	// (e.g. request.timeout.ms, socket.timeout.ms), applied after the
	// relay's own; the properties the delivery contract rests on
	// (ProtectedProducerSettings) are refused.
	ProducerSettings map[string]string `name:"kafka-producer-setting" help:"librdkafka property key=value for the reader's producer (repeatable); the delivery, ordering and queue settings cannot be changed."`
}

// ProtectedProducerSettings are the librdkafka properties of the relay's
// producer that --kafka-producer-setting may not change: idempotence and
// acks (no loss, no duplicate within a session), the infinite message
// timeout (no gap in a partition's sequence, see RelaySettings), retries and
// in-flight requests (ordering), the partitioner (an order's records in one
// partition, the same one the replay commands choose), the queue sizes
// derived from the in-flight bounds, the connection and the Go channels.
var ProtectedProducerSettings = []string{
	"enable.idempotence", "acks", "request.required.acks", "message.timeout.ms", "delivery.timeout.ms",
	"retries", "message.send.max.retries", "max.in.flight", "max.in.flight.requests.per.connection",
	"enable.gapless.guarantee", "transactional.id", "queue.buffering.max.messages", "queue.buffering.max.kbytes", "partitioner",
	"bootstrap.servers", "metadata.broker.list", "client.id", "security.protocol",
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Brokers == "" {
		errs = append(errs, errors.New("kafka-brokers is required"))
	}
	for k := range c.ProducerSettings {
		if slices.Contains(ProtectedProducerSettings, k) || strings.HasPrefix(k, "go.") ||
			strings.HasPrefix(k, "ssl.") || strings.HasPrefix(k, "sasl.") {
			errs = append(errs, fmt.Errorf("kafka-producer-setting %s: the reader sets it itself and it cannot be changed", k))
		}
	}
	return errors.Join(errs...)
}

// RelaySettings are the relay's librdkafka settings beyond the publisher's
// own (idempotence, acks=all), for in-flight bounds of events and bytes.
//
// message.timeout.ms is 0, infinite: a record is retried until Kafka
// acknowledges it or the session ends. librdkafka documents that an
// idempotent producer whose records time out leaves a gap in the
// partition's sequence: it fails the timed-out records, bumps its epoch and
// goes on with the later ones, so a later event of an order could reach
// Kafka before an earlier one that the next session republishes (Cancelled,
// Created, Cancelled). Without a timeout a Kafka outage only pauses the
// relay (the in-flight bounds fill and it stops reading); shutdown and lost
// leadership still end the session, whose flush is bounded by the flush
// timeout and whose unacknowledged records are purged, never confirmed.
//
// librdkafka's local queue is sized above the relay's own in-flight bounds,
// so the bounds, not the queue, pause the relay. ProducerSettings come
// last; Validate refused the ones that would break the above.
func (c Config) RelaySettings(inflightEvents int, inflightBytes int64) kafka.ConfigMap {
	kbytes := inflightBytes*2/1024 + 1024
	cm := kafka.ConfigMap{
		"message.timeout.ms":           0,
		"queue.buffering.max.messages": inflightEvents + 1000,
		"queue.buffering.max.kbytes":   int(min(kbytes, 2097151)),
		"go.events.channel.size":       min(inflightEvents+1000, 100000),
		"go.produce.channel.size":      1000,
	}
	for k, v := range c.ProducerSettings {
		cm[k] = v
	}
	return cm
}

// Driver opens Kafka publishers; it is the relay's sink.Driver.
type Driver struct {
	// Bootstrap is the Kafka bootstrap server list.
	Bootstrap string
	// Extra librdkafka settings applied last (RelaySettings for the relay;
	// none for the replay commands).
	Extra  kafka.ConfigMap
	Logger *slog.Logger
}

// Open opens a publisher whose client ID is name.
func (d Driver) Open(name string, onDelivery sink.DeliveryFunc) (sink.Sink, error) {
	return New(Options{Bootstrap: d.Bootstrap, ClientID: name, Extra: d.Extra}, d.Logger, onDelivery)
}

// Permanent implements sink.Driver (Permanent).
func (Driver) Permanent(err error) bool { return Permanent(err) }

// ErrorCode implements sink.Driver (ErrorCode).
func (Driver) ErrorCode(err error) string { return ErrorCode(err) }
