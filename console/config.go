// Package console is EventForge's console: the front end served at /ui/
// (built from web/ and embedded) and the JSON ops API behind it at
// /api/ops/. The ops API follows one order through the real delivery path,
// samples the pipeline's health for the operations charts, lists and replays
// the dead-letter queue, and — only when drills are enabled — runs the
// failure drills on the real stack. docs/console.md is the contract.
package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
)

// Config configures the console. The zero value is not valid; start from
// DefaultConfig or from the flags of `eventforge api`.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (the api's).
	DatabaseURL string `kong:"-"`
	// Enabled mounts the console on the api's HTTP server. Off by default:
	// the ops API replays the DLQ and shows order traces, and CheckExposure
	// refuses it on a non-loopback address without OpsToken.
	Enabled bool `name:"console" help:"Serve the console (/ui/) and its ops API (/api/ops/) on the HTTP address. Off by default; on a non-loopback --http-addr it needs --ops-token."`
	// EnableDrills registers the drill endpoints; without it they answer 404.
	EnableDrills bool `name:"enable-drills" help:"Enable the console's failure drills (they crash and restart components; on in dev)."`
	// OpsToken, when set, is the bearer token every /api/ops/ request must
	// carry; requests without it get 401.
	OpsToken string `name:"ops-token" log:"secret" help:"Require this bearer token on the console's ops API (/api/ops/); required with --console on a non-loopback --http-addr (prefer the environment variable to the flag)."`
	// KafkaBrokers is the Kafka bootstrap server list.
	KafkaBrokers string `name:"kafka-brokers" help:"Kafka bootstrap servers (console: topic, offsets, DLQ)." default:"${kafka_brokers}"`
	// Topic is the topic the CDC reader publishes order events to.
	Topic string `name:"console-topic" help:"Topic of the order events shown by the console." default:"${topic}"`
	// DLQTopic is the dead-letter topic; empty means <Topic>.dlq.
	DLQTopic string `name:"console-dlq-topic" help:"Dead-letter topic shown by the console (default <topic>.dlq)."`
	// Slot is the replication slot of the CDC reader.
	Slot string `name:"console-slot" help:"Replication slot shown by the console." default:"${slot}"`
	// Consumers maps consumer names to their Kafka groups; by default every
	// registered consumer (consumer/registry) with its default group. The
	// drills need the one marked Drilled among them.
	Consumers map[string]string `name:"console-consumer" help:"consumer=group pairs shown by the console (repeatable)." default:"${consumer_groups}"`
	// MetricsSources maps a component name to a Prometheus text endpoint the
	// console scrapes for the figures only that component knows (replication
	// lag, oldest unpublished age, publish errors, retries). The console's
	// own process is always read.
	MetricsSources map[string]string `name:"console-metrics" help:"component=URL of a /metrics endpoint to chart (repeatable)."`
	// SampleInterval is how often the operations figures are sampled.
	SampleInterval time.Duration `name:"console-sample-interval" help:"How often the console samples the operations figures." default:"2s"`
	// History is how many samples are kept for the charts.
	History int `name:"console-history" help:"How many samples the console keeps for its charts." default:"900"`
}

// drilledConsumer is the consumer whose registry entry (package
// consumer/registry) is marked Drilled: the drills restart it and count its
// effects on their order (its OrderEffects; the fulfillment consumer's
// shipments).
var drilledConsumer = registry.Drilled()

// DefaultConfig returns the configuration the flags default to (their
// tags, read by config.Defaults). Its DatabaseURL is empty: the console uses
// the api's database, which whoever mounts it sets (`eventforge api`,
// `eventforge dev`).
func DefaultConfig() Config {
	return config.Defaults[Config](registry.FlagVars())
}

// LogValue is the configuration as the startup line shows it: every flag of the
// console, secrets masked (logging.ConfigValue).
func (c Config) LogValue() slog.Value { return logging.ConfigValue(c) }

// Validate reports every invalid field at once. DatabaseURL is not checked
// here: it is the api's and is set after the flags are parsed (New checks
// it).
func (c Config) Validate() error {
	var errs []error
	if c.KafkaBrokers == "" || c.Topic == "" || c.Slot == "" {
		errs = append(errs, errors.New("kafka-brokers, console-topic and console-slot are required"))
	}
	if len(c.Consumers) == 0 {
		errs = append(errs, errors.New("at least one console-consumer is required"))
	}
	if c.SampleInterval <= 0 || c.History <= 0 {
		errs = append(errs, errors.New("console-sample-interval and console-history must be positive"))
	}
	return errors.Join(errs...)
}

// CheckExposure refuses an enabled console without OpsToken on addr, the
// HTTP listen address, unless addr is a loopback address: anyone who
// reaches the ops API could replay the DLQ and read order traces.
func (c Config) CheckExposure(addr string) error {
	if !c.Enabled || c.OpsToken != "" || Loopback(addr) {
		return nil
	}
	return fmt.Errorf("--console on %s, which is not a loopback address, needs --ops-token (EVENTFORGE_OPS_TOKEN): "+
		"set a token, listen on 127.0.0.1, or leave the console off", addr)
}

// Loopback reports whether the listen address addr (host:port) accepts
// connections from this machine only: its host is "localhost" or a loopback
// IP. An empty host or an unspecified IP (0.0.0.0, ::) listens on every
// interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (c Config) dlqTopic() string {
	if c.DLQTopic != "" {
		return c.DLQTopic
	}
	return c.Topic + ".dlq"
}
