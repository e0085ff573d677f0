package debezium

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/internal/localstack"
)

// TestPomPinsTheNamedVersions keeps the version constants, which the
// benchmark reports, equal to what the pom resolves.
func TestPomPinsTheNamedVersions(t *testing.T) {
	for _, want := range []string{
		"<kafka.version>" + KafkaConnectVersion + "</kafka.version>",
		"<debezium.version>" + DebeziumVersion + "</debezium.version>",
	} {
		if !strings.Contains(string(Pom), want) {
			t.Errorf("pom.xml lacks %s", want)
		}
	}
}

// properties parses key=value lines.
func properties(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q is no key=value", line)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("key %s set twice", k)
		}
		out[k] = v
	}
	return out
}

// TestPropertiesCarryTheDocumentedSettings checks the settings docs/bench.md
// names: EventForge's delivery guarantees and producer settings, the
// connector's own slot and publication, streaming from the slot without a
// snapshot, and the router keyed and headed as EventForge's records are.
func TestPropertiesCarryTheDocumentedSettings(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "bench_x_dbz", DatabaseURL: "postgres://eventforge:secret@127.0.0.1:54329/bench_x?sslmode=disable",
		Bootstrap: "127.0.0.1:19092", Slot: "bench_x_dbz", Publication: "bench_x_dbz", RESTAddr: "127.0.0.1:18083",
		Dir: dir, Tuning: DefaultTuning()}
	worker := properties(t, cfg.WorkerProperties())
	connectorText, err := cfg.ConnectorProperties()
	if err != nil {
		t.Fatal(err)
	}
	connector := properties(t, connectorText)
	for _, c := range []struct {
		props      map[string]string
		key, value string
	}{
		{worker, "bootstrap.servers", "127.0.0.1:19092"},
		{worker, "listeners", "http://127.0.0.1:18083"},
		{worker, "offset.storage.file.filename", filepath.Join(dir, "offsets")},
		{worker, "offset.flush.interval.ms", "1000"},
		{worker, "producer.acks", "all"},
		{worker, "producer.enable.idempotence", "true"},
		{worker, "producer.linger.ms", "1"},
		{worker, "producer.compression.type", "lz4"},
		{connector, "database.hostname", "127.0.0.1"},
		{connector, "database.port", "54329"},
		{connector, "database.user", "eventforge"},
		{connector, "database.password", "secret"},
		{connector, "database.dbname", "bench_x"},
		{connector, "plugin.name", "pgoutput"},
		{connector, "slot.name", "bench_x_dbz"},
		{connector, "publication.name", "bench_x_dbz"},
		{connector, "publication.autocreate.mode", "disabled"},
		{connector, "snapshot.mode", "no_data"},
		{connector, "poll.interval.ms", "1"},
		{connector, "transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"},
		{connector, "transforms.outbox.table.field.event.key", "aggregateid"},
		{connector, "transforms.outbox.table.field.event.id", "id"},
		{connector, "transforms.outbox.route.topic.replacement", "bench_x_dbz.${routedByValue}"},
	} {
		if got := c.props[c.key]; got != c.value {
			t.Errorf("%s = %q, want %q", c.key, got, c.value)
		}
	}
	if got := cfg.OrderTopic(); got != "bench_x_dbz.order" {
		t.Errorf("order topic %q", got)
	}

	java, args, err := cfg.Command(localstack.Jars{LibsDir: "/libs", Java: "/usr/bin/java"})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	if java != "/usr/bin/java" || !strings.Contains(line, "-cp /libs/* "+mainClass+" "+filepath.Join(dir, "worker.properties")) {
		t.Errorf("command %s %s", java, line)
	}
	for _, name := range []string{"worker.properties", "connector.properties", "log4j2.xml"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Command wrote no %s: %v", name, err)
		}
	}
}
