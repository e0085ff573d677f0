package console

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/eventforge/eventforge/internal/kafkaconf/kafkaconftest"
)

// TestClientsCarryTheKafkaSecuritySettings: every Kafka client the console
// creates (its admin client and readers here, the kafkaread.Reader, the
// DLQ reader and replay producer of consumer/dlq) is configured through
// kafkaconf; New fails when the TLS settings name a CA file that does not
// exist, and succeeds once they are plaintext again (no broker or database
// is contacted by New).
func TestClientsCarryTheKafkaSecuritySettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DatabaseURL = "postgres://eventforge@127.0.0.1:1/eventforge?sslmode=disable"
	cfg.KafkaBrokers = "127.0.0.1:1"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("sasl_ssl", func(t *testing.T) {
		want := kafkaconftest.Secure(t)
		kafkaconftest.Check(t, "admin config", adminConfig(cfg.KafkaBrokers), want)
		kafkaconftest.Check(t, "reader config", readerConfig(cfg.KafkaBrokers), want)
		if c, err := New(context.Background(), cfg, nil, logger); err == nil {
			c.close()
			t.Fatal("New created the console's Kafka clients with a CA file that does not exist: the TLS settings did not reach them")
		}
	})
	t.Run("plaintext", func(t *testing.T) {
		c, err := New(context.Background(), cfg, nil, logger)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		c.close()
	})
}
