// Package kafkaconf builds librdkafka configuration shared by EventForge's
// producers and consumers and bridges librdkafka's logs into slog.
package kafkaconf

import (
	"context"
	"log/slog"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Base returns the settings every EventForge client uses: the bootstrap
// servers, a client id, and librdkafka logs delivered to a channel (see
// BridgeLogs) instead of stderr.
// The TLS and SASL settings installed by Configure are added.
func Base(bootstrap, clientID string, logs chan kafka.LogEvent) kafka.ConfigMap {
	cm := kafka.ConfigMap{
		"bootstrap.servers":      bootstrap,
		"client.id":              clientID,
		"go.logs.channel.enable": true,
		"go.logs.channel":        logs,
		// Loopback and small clusters: do not wait for IPv6 lookups.
		"broker.address.family": "v4",
	}
	for k, v := range securitySettings() {
		cm[k] = v
	}
	return cm
}

// Tool returns the settings of a client whose librdkafka logs are not
// bridged: the operator commands (`eventforge dlq`), the console, the
// delivery auditor and their readers. librdkafka logs only errors, to
// stderr. The TLS and SASL settings installed by Configure are added, as
// Base adds them.
func Tool(bootstrap, clientID string) kafka.ConfigMap {
	cm := kafka.ConfigMap{
		"bootstrap.servers":     bootstrap,
		"client.id":             clientID,
		"broker.address.family": "v4",
		"log_level":             3,
	}
	for k, v := range securitySettings() {
		cm[k] = v
	}
	return cm
}

// BridgeLogs forwards librdkafka log events to logger until logs is closed.
// librdkafka levels follow syslog: 0–3 error, 4 warning, 5–6 info, 7 debug.
func BridgeLogs(logs <-chan kafka.LogEvent, logger *slog.Logger) {
	for e := range logs {
		level := slog.LevelDebug
		switch {
		case e.Level <= 3:
			level = slog.LevelError
		case e.Level == 4:
			level = slog.LevelWarn
		case e.Level <= 6:
			level = slog.LevelInfo
		}
		logger.Log(context.Background(), level, e.Message, "component", "librdkafka", "client", e.Name, "tag", e.Tag)
	}
}
