package kafkaconf

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/eventforge/eventforge/internal/logging"
)

// Security is the TLS and SASL configuration of the Kafka clients that Base
// and Tool build: cdc's producer, the consumers and their DLQ writers, the
// console, the auditor and `eventforge dlq`. The command
// line embeds it, so every command takes the --kafka-* flags and their
// EVENTFORGE_KAFKA_* variables; Configure installs it for the process.
type Security struct {
	// Protocol is librdkafka's security.protocol.
	Protocol string `name:"kafka-security-protocol" help:"Kafka security protocol: plaintext, ssl, sasl_plaintext or sasl_ssl." enum:"plaintext,ssl,sasl_plaintext,sasl_ssl" default:"plaintext"`
	// TLSCA is a PEM file of CA certificates that verify the brokers; empty
	// uses the system's trust store.
	TLSCA string `name:"kafka-tls-ca" help:"PEM file of the CA certificates that verify the Kafka brokers (ssl, sasl_ssl); empty: the system's."`
	// TLSCert and TLSKey are the client certificate and key for mutual TLS.
	TLSCert string `name:"kafka-tls-cert" help:"PEM client certificate for mutual TLS with Kafka."`
	TLSKey  string `name:"kafka-tls-key" help:"PEM private key of --kafka-tls-cert."`
	// SASLMechanism is sasl.mechanism for the sasl_* protocols.
	SASLMechanism string `name:"kafka-sasl-mechanism" help:"Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512." enum:"PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" default:"SCRAM-SHA-512"`
	// SASLUsername and SASLPassword are the SASL credentials.
	SASLUsername string `name:"kafka-sasl-username" help:"Kafka SASL username."`
	SASLPassword string `name:"kafka-sasl-password" log:"secret" help:"Kafka SASL password (prefer the environment variable to the flag)."`
}

// LogValue is the settings as a startup line shows them, the SASL password
// masked (logging.ConfigValue).
func (s Security) LogValue() slog.Value { return logging.ConfigValue(s) }

// Validate reports every inconsistent setting at once.
func (s Security) Validate() error {
	var errs []error
	tls := s.Protocol == "ssl" || s.Protocol == "sasl_ssl"
	sasl := s.Protocol == "sasl_plaintext" || s.Protocol == "sasl_ssl"
	if !tls && (s.TLSCA != "" || s.TLSCert != "" || s.TLSKey != "") {
		errs = append(errs, fmt.Errorf("kafka-tls-* need kafka-security-protocol ssl or sasl_ssl, not %q", s.Protocol))
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		errs = append(errs, errors.New("kafka-tls-cert and kafka-tls-key go together"))
	}
	if sasl && (s.SASLUsername == "" || s.SASLPassword == "") {
		errs = append(errs, fmt.Errorf("kafka-security-protocol %s needs kafka-sasl-username and kafka-sasl-password", s.Protocol))
	}
	if !sasl && (s.SASLUsername != "" || s.SASLPassword != "") {
		errs = append(errs, fmt.Errorf("kafka-sasl-* need kafka-security-protocol sasl_plaintext or sasl_ssl, not %q", s.Protocol))
	}
	return errors.Join(errs...)
}

// Settings returns the librdkafka properties of s; none for plaintext.
func (s Security) Settings() kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	if s.Protocol == "" || s.Protocol == "plaintext" {
		return cm
	}
	cm["security.protocol"] = s.Protocol
	set := func(k, v string) {
		if v != "" {
			cm[k] = v
		}
	}
	set("ssl.ca.location", s.TLSCA)
	set("ssl.certificate.location", s.TLSCert)
	set("ssl.key.location", s.TLSKey)
	if s.Protocol == "sasl_plaintext" || s.Protocol == "sasl_ssl" {
		set("sasl.mechanism", s.SASLMechanism)
		set("sasl.username", s.SASLUsername)
		set("sasl.password", s.SASLPassword)
	}
	return cm
}

var (
	securityMu sync.Mutex
	security   = kafka.ConfigMap{}
)

// Configure validates s and makes Base add its settings to every client
// configuration built afterwards in this process.
func Configure(s Security) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("kafka security: %w", err)
	}
	securityMu.Lock()
	defer securityMu.Unlock()
	security = s.Settings()
	return nil
}

func securitySettings() kafka.ConfigMap {
	securityMu.Lock()
	defer securityMu.Unlock()
	cm := make(kafka.ConfigMap, len(security))
	for k, v := range security {
		cm[k] = v
	}
	return cm
}
