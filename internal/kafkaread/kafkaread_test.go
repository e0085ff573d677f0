package kafkaread

import (
	"testing"

	"github.com/eventforge/eventforge/internal/kafkaconf/kafkaconftest"
)

// TestClientsCarryTheKafkaSecuritySettings: every consumer a Reader creates
// (New, ReadFrom, Committed) is configured by config, which carries the
// --kafka-* settings; librdkafka then refuses to create one with a CA file
// that does not exist, and creates it once the settings are plaintext again.
func TestClientsCarryTheKafkaSecuritySettings(t *testing.T) {
	t.Run("sasl_ssl", func(t *testing.T) {
		want := kafkaconftest.Secure(t)
		kafkaconftest.Check(t, "reader config", config("127.0.0.1:1", readerGroup), want)
		kafkaconftest.Check(t, "offset reader config", config("127.0.0.1:1", "some-group"), want)
		if r, err := New("127.0.0.1:1"); err == nil {
			r.Close()
			t.Fatal("New created a reader with a CA file that does not exist: the TLS settings did not reach it")
		}
	})
	t.Run("plaintext", func(t *testing.T) {
		r, err := New("127.0.0.1:1")
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		r.Close()
	})
}
