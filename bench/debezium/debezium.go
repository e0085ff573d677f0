// Package debezium is the Debezium peer of the benchmark: a Kafka Connect
// standalone worker running the Debezium PostgreSQL connector (pgoutput)
// with the Outbox Event Router on EventForge's outbox table, publishing to
// the same Kafka with acks=all and idempotence as EventForge's reader does.
// It pins the versions (pom.xml, resolved from Maven Central into the local
// stack's state dir), renders the worker's and the connector's properties,
// and builds the java command line; the bench package runs and measures it.
// docs/bench.md ("Peers: Debezium") explains every setting.
package debezium

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/localstack"
)

// Versions of the peer, as pinned in pom.xml.
const (
	KafkaConnectVersion = "4.1.1"
	DebeziumVersion     = "3.6.1.Final"
)

// Pom is the Maven project whose dependencies are the worker's class path.
//
//go:embed pom.xml
var Pom []byte

// ClassPathName is the directory of the state dir the jars are resolved
// into.
const ClassPathName = "debezium"

// mainClass is Kafka Connect's standalone worker.
const mainClass = "org.apache.kafka.connect.cli.ConnectStandalone"

// jvmArgs are the options connect-standalone.sh (and kafka-run-class.sh)
// start a worker with when KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS
// are unset: what a user running Kafka Connect gets.
var jvmArgs = []string{"-Xms256M", "-Xmx2G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
	"-Djava.awt.headless=true"}

// Resolve makes sure the pinned jars are in the local stack's state dir
// (Maven Central, once per pom) and returns them with the java program.
func Resolve(ctx context.Context, stack localstack.Config, log *slog.Logger) (localstack.Jars, error) {
	return localstack.ResolveJars(ctx, stack, ClassPathName, Pom, log)
}

// Tuning is what a user tuning Debezium for throughput and latency sets;
// DefaultTuning says why each value.
type Tuning struct {
	MaxBatchSize          int // max.batch.size: events handed to Connect per poll
	MaxQueueSize          int // max.queue.size: events buffered between the reader and Connect
	PollIntervalMS        int // poll.interval.ms: longest wait for a batch to fill
	OffsetFlushIntervalMS int // offset.flush.interval.ms: how often offsets (and so the slot) advance
	LingerMS              int // producer.linger.ms
	BatchSizeBytes        int // producer.batch.size
	Compression           string
}

// DefaultTuning is the tuning the benchmark runs Debezium with.
func DefaultTuning() Tuning {
	return Tuning{
		// Twice the defaults (2048, 8192): a drain hands Connect full
		// batches, and the queue keeps the reader streaming while Connect
		// converts and sends one.
		MaxBatchSize: 4096,
		MaxQueueSize: 16384,
		// The task waits for a full batch up to this long (default 500 ms),
		// which at low rates is added to every event's latency; 1 ms
		// matches EventForge's linger.
		PollIntervalMS: 1,
		// Default 60 s: the slot's confirmed position trails Kafka's acks
		// by up to this much. 1 s keeps WAL retention close to EventForge's.
		OffsetFlushIntervalMS: 1000,
		// EventForge's producer settings: linger 1 ms, lz4. The Java
		// producer's batch.size default (16 KiB) caps a batch at about 25
		// events; librdkafka's default is 1 MB.
		LingerMS:       1,
		BatchSizeBytes: 1 << 20,
		Compression:    "lz4",
	}
}

// Config is one worker running one connector.
type Config struct {
	// Name names the connector and prefixes its topics; it must be unique
	// on the stack.
	Name string
	// DatabaseURL is the database holding EventForge's outbox table, as a
	// role with REPLICATION.
	DatabaseURL string
	// Bootstrap is the Kafka bootstrap address.
	Bootstrap string
	// Slot and Publication are the connector's own; both must exist before
	// the events it is to stream are committed.
	Slot, Publication string
	// RESTAddr is host:port of the worker's REST listener.
	RESTAddr string
	// Dir receives the properties, the offsets file and the log4j2 file.
	Dir string
	// Tuning is the connector's and producer's tuning.
	Tuning Tuning
}

// Topic is the topic the router sends an aggregate type's events to:
// <name>.<aggregate type>, e.g. "<name>.order".
func (c Config) Topic(aggregateType string) string { return c.Name + "." + aggregateType }

// OrderTopic is the topic order events go to.
func (c Config) OrderTopic() string { return c.Topic(contract.AggregateOrder) }

// property is one key=value line.
type property struct{ key, value string }

func render(props []property) string {
	var b strings.Builder
	for _, p := range props {
		fmt.Fprintf(&b, "%s=%s\n", p.key, p.value)
	}
	return b.String()
}

// WorkerProperties renders the standalone worker's properties.
func (c Config) WorkerProperties() string {
	t := c.Tuning
	return render([]property{
		{"bootstrap.servers", c.Bootstrap},
		{"listeners", "http://" + c.RESTAddr},
		{"offset.storage.file.filename", filepath.Join(c.Dir, "offsets")},
		{"offset.flush.interval.ms", strconv.Itoa(t.OffsetFlushIntervalMS)},
		// Keys are order ids and values the payload's JSON text, as
		// EventForge publishes them: no schema envelope.
		{"key.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"value.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"header.converter", "org.apache.kafka.connect.storage.SimpleHeaderConverter"},
		// Every plugin is on the class path; its service manifests name it.
		{"plugin.discovery", "service_load"},
		{"producer.acks", "all"},
		{"producer.enable.idempotence", "true"},
		{"producer.max.in.flight.requests.per.connection", "5"},
		{"producer.linger.ms", strconv.Itoa(t.LingerMS)},
		{"producer.batch.size", strconv.Itoa(t.BatchSizeBytes)},
		{"producer.compression.type", t.Compression},
	})
}

// ConnectorProperties renders the connector's properties.
func (c Config) ConnectorProperties() (string, error) {
	u, err := url.Parse(c.DatabaseURL)
	if err != nil {
		return "", fmt.Errorf("parsing database url: %w", err)
	}
	pw, _ := u.User.Password()
	t := c.Tuning
	return render([]property{
		{"name", c.Name},
		{"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
		{"tasks.max", "1"},
		{"database.hostname", u.Hostname()},
		{"database.port", u.Port()},
		{"database.user", u.User.Username()},
		{"database.password", pw},
		{"database.dbname", strings.TrimPrefix(u.Path, "/")},
		{"topic.prefix", c.Name},
		{"plugin.name", "pgoutput"},
		{"slot.name", c.Slot},
		{"publication.name", c.Publication},
		{"publication.autocreate.mode", "disabled"},
		{"table.include.list", "public.outbox"},
		{"snapshot.mode", "no_data"},
		{"tombstones.on.delete", "false"},
		{"max.batch.size", strconv.Itoa(t.MaxBatchSize)},
		{"max.queue.size", strconv.Itoa(t.MaxQueueSize)},
		{"poll.interval.ms", strconv.Itoa(t.PollIntervalMS)},
		{"transforms", "outbox"},
		{"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"},
		{"transforms.outbox.table.field.event.id", "id"},
		{"transforms.outbox.table.field.event.key", "aggregateid"},
		{"transforms.outbox.table.field.event.payload", "payload"},
		{"transforms.outbox.table.fields.additional.placement", "type:header:" + contract.HeaderType},
		{"transforms.outbox.route.by.field", "aggregatetype"},
		{"transforms.outbox.route.topic.replacement", c.Name + ".${routedByValue}"},
	}), nil
}

// log4j2 sends the worker's log to standard output (the bench's log file
// of the process) at INFO, Kafka Connect's default level.
const log4j2 = `<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="stdout"/></Root>
  </Loggers>
</Configuration>
`

// Command writes the worker's files into c.Dir and returns the java
// program and arguments that start the worker with the connector.
func (c Config) Command(jars localstack.Jars) (string, []string, error) {
	connector, err := c.ConnectorProperties()
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating %s: %w", c.Dir, err)
	}
	files := map[string]string{"worker.properties": c.WorkerProperties(), "connector.properties": connector, "log4j2.xml": log4j2}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(content), 0o600); err != nil {
			return "", nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	args := append([]string{}, jvmArgs...)
	args = append(args, "-Dlog4j2.configurationFile="+filepath.Join(c.Dir, "log4j2.xml"),
		"-cp", filepath.Join(jars.LibsDir, "*"), mainClass,
		filepath.Join(c.Dir, "worker.properties"), filepath.Join(c.Dir, "connector.properties"))
	return jars.Java, args, nil
}
