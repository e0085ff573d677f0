// Package kafkaconftest checks that a package builds its Kafka clients
// through kafkaconf, so that the --kafka-* TLS and SASL settings reach them.
package kafkaconftest

import (
	"path/filepath"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Secure installs SASL over TLS for the rest of the test (plaintext again at
// cleanup), with a CA file that does not exist: librdkafka loads the CA when
// a client is created, so every client built from these settings fails to
// be created, while a client that ignores them is created. It returns the
// settings a client configuration must carry.
//
// The settings are process-wide: call it from a test that does not run in
// parallel with tests that connect to Kafka.
func Secure(t testing.TB) kafka.ConfigMap {
	t.Helper()
	s := kafkaconf.Security{
		Protocol:      "sasl_ssl",
		TLSCA:         filepath.Join(t.TempDir(), "missing-ca.pem"),
		SASLMechanism: "SCRAM-SHA-512",
		SASLUsername:  "eventforge-test",
		SASLPassword:  "test-password",
	}
	if err := kafkaconf.Configure(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kafkaconf.Configure(kafkaconf.Security{Protocol: "plaintext"}); err != nil {
			t.Error(err)
		}
	})
	return s.Settings()
}

// Check fails the test unless cm carries every setting of want.
func Check(t testing.TB, what string, cm, want kafka.ConfigMap) {
	t.Helper()
	for k, v := range want {
		if cm[k] != v {
			t.Errorf("%s: %s = %v, want %v (the client is not built through kafkaconf)", what, k, cm[k], v)
		}
	}
}
