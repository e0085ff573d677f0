package dlq

import (
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// readerConfig configures NewReader's consumer: built by kafkaconf, so the
// --kafka-* TLS and SASL settings apply; it joins no group and commits
// nothing.
func readerConfig(bootstrap string) kafka.ConfigMap {
	cfg := kafkaconf.Tool(bootstrap, "eventforge-dlq-reader")
	cfg["group.id"] = "eventforge-dlq-reader" // required by librdkafka; never joined
	cfg["enable.auto.commit"] = false
	for k, v := range ReaderSettings {
		cfg[k] = v
	}
	return cfg
}

// producerConfig configures NewProducer's idempotent, acks=all producer,
// built by kafkaconf like readerConfig.
func producerConfig(bootstrap string) kafka.ConfigMap {
	cfg := kafkaconf.Tool(bootstrap, "eventforge-dlq-replay")
	cfg["enable.idempotence"] = true
	cfg["acks"] = "all"
	// Replays go out through Produce with at most replayWindow waiting for
	// their acknowledgement, and Events() carries only errors: the Go
	// client's default channels of 1,000,000 slots each, allocated on the
	// Go heap, are never used.
	cfg["go.produce.channel.size"] = 16
	cfg["go.events.channel.size"] = 64
	return cfg
}
