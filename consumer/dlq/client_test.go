package dlq

import (
	"testing"

	"github.com/eventforge/eventforge/internal/kafkaconf/kafkaconftest"
)

// TestClientsCarryTheKafkaSecuritySettings: the reader and the replay
// producer (and the admin client `eventforge dlq purge` derives from the
// reader) carry the --kafka-* settings; librdkafka refuses to create them
// with a CA file that does not exist, and creates them once the settings
// are plaintext again.
func TestClientsCarryTheKafkaSecuritySettings(t *testing.T) {
	t.Run("sasl_ssl", func(t *testing.T) {
		want := kafkaconftest.Secure(t)
		kafkaconftest.Check(t, "reader config", readerConfig("127.0.0.1:1"), want)
		kafkaconftest.Check(t, "producer config", ReplayConfig("127.0.0.1:1"), want)
		if c, err := NewReader("127.0.0.1:1"); err == nil {
			c.Close()
			t.Error("NewReader created a consumer with a CA file that does not exist: the TLS settings did not reach it")
		}
		if p, err := NewProducer(ReplayConfig("127.0.0.1:1"), nil); err == nil {
			p.Close()
			t.Error("NewProducer created a producer with a CA file that does not exist: the TLS settings did not reach it")
		}
	})
	t.Run("plaintext", func(t *testing.T) {
		c, err := NewReader("127.0.0.1:1")
		if err != nil {
			t.Fatalf("NewReader: %v", err)
		}
		c.Close()
		p, err := NewProducer(ReplayConfig("127.0.0.1:1"), nil)
		if err != nil {
			t.Fatalf("NewProducer: %v", err)
		}
		p.Close()
	})
}
