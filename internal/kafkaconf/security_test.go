package kafkaconf

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/testkit"
)

func TestSecurityValidate(t *testing.T) {
	tests := []struct {
		name    string
		s       Security
		wantErr string
	}{
		{"plaintext", Security{Protocol: "plaintext"}, ""},
		{"tls with system CAs", Security{Protocol: "ssl"}, ""},
		{"mutual tls", Security{Protocol: "ssl", TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem"}, ""},
		{"sasl scram over tls", Security{Protocol: "sasl_ssl", SASLMechanism: "SCRAM-SHA-512", SASLUsername: "u", SASLPassword: "p"}, ""},
		{"cert without key", Security{Protocol: "ssl", TLSCert: "c.pem"}, "go together"},
		{"tls files on plaintext", Security{Protocol: "plaintext", TLSCA: "ca.pem"}, "need kafka-security-protocol ssl"},
		{"sasl without password", Security{Protocol: "sasl_plaintext", SASLUsername: "u"}, "needs kafka-sasl-username and kafka-sasl-password"},
		{"sasl credentials on ssl", Security{Protocol: "ssl", SASLUsername: "u", SASLPassword: "p"}, "need kafka-security-protocol sasl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.s.Validate(); !testkit.ErrorContains(err, tt.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestSecuritySettingsAcceptedByLibrdkafka configures real clients: a
// property librdkafka does not know, or a certificate it cannot load, fails
// client creation (no broker is contacted).
func TestSecuritySettingsAcceptedByLibrdkafka(t *testing.T) {
	c := testkit.SelfSignedCert(t, t.TempDir(), "eventforge-test")
	cert, key := c.CertFile, c.KeyFile
	tests := []struct {
		name string
		s    Security
		want kafka.ConfigMap
	}{
		{"plaintext adds nothing", Security{Protocol: "plaintext", SASLMechanism: "SCRAM-SHA-512"}, kafka.ConfigMap{}},
		{"mutual tls", Security{Protocol: "ssl", TLSCA: cert, TLSCert: cert, TLSKey: key, SASLMechanism: "PLAIN"},
			kafka.ConfigMap{"security.protocol": "ssl", "ssl.ca.location": cert, "ssl.certificate.location": cert, "ssl.key.location": key}},
		{"sasl scram over tls", Security{Protocol: "sasl_ssl", TLSCA: cert, SASLMechanism: "SCRAM-SHA-256", SASLUsername: "u", SASLPassword: "p"},
			kafka.ConfigMap{"security.protocol": "sasl_ssl", "ssl.ca.location": cert, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"}},
		{"sasl plain", Security{Protocol: "sasl_plaintext", SASLMechanism: "PLAIN", SASLUsername: "u", SASLPassword: "p"},
			kafka.ConfigMap{"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Configure(tt.s); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = Configure(Security{Protocol: "plaintext"}) })
			logs := make(chan kafka.LogEvent, 64)
			for name, cm := range map[string]kafka.ConfigMap{
				"Base": Base("127.0.0.1:1", "security-test", logs),
				"Tool": Tool("127.0.0.1:1", "security-test"),
			} {
				for k, v := range tt.want {
					if cm[k] != v {
						t.Errorf("%s()[%s] = %v, want %v", name, k, cm[k], v)
					}
				}
				if len(tt.want) == 0 {
					if _, ok := cm["security.protocol"]; ok {
						t.Errorf("%s: plaintext must leave security.protocol unset, got %v", name, cm["security.protocol"])
					}
				}
				p, err := kafka.NewProducer(&cm)
				if err != nil {
					t.Fatalf("librdkafka refused the settings of %s: %v", name, err)
				}
				p.Close()
			}
		})
	}
}

func TestConfigureRejectsInvalid(t *testing.T) {
	if err := Configure(Security{Protocol: "sasl_ssl"}); err == nil {
		t.Fatal("Configure accepted sasl_ssl without credentials")
	}
	if got := securitySettings(); len(got) != 0 {
		t.Fatalf("a rejected configuration was installed: %v", got)
	}
}
