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
