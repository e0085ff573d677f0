package localstack

import (
	"strings"
	"testing"

	"github.com/eventforge/eventforge/deploy/local"
)

func TestRenderServerProperties(t *testing.T) {
	cfg := Config{StateDir: "/var/tmp/s", KafkaPort: 29092, KafkaControllerPort: 29093}.withDefaults()
	b, err := renderServerProperties(cfg, newLayout(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	props := parseProperties(string(b))
	want := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
		"controller.quorum.voters":                         "1@127.0.0.1:29093",
		"listeners":                                        "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093",
		"advertised.listeners":                             "PLAINTEXT://127.0.0.1:29092",
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"log.dirs":                                         "/var/tmp/s/kafka/data",
		"offsets.topic.replication.factor":                 "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
	}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("%s = %q, want %q", k, props[k], v)
		}
	}
	if strings.Contains(string(b), "{{") {
		t.Errorf("unrendered template action left:\n%s", b)
	}
}

func TestRenderPGConf(t *testing.T) {
	cfg := Config{StateDir: "/var/tmp/s", PGPort: 45432, PGVersion: 15, PGSettings: []string{"wal_sender_timeout = 5s"}}.withDefaults()
	b, err := renderPGConf(cfg, newLayout(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, line := range []string{
		"port = 45432",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '/var/tmp/s/pg/run'",
		"log_directory = '/var/tmp/s/pg/log'",
		"wal_level = logical",
		"max_replication_slots = 20",
		"max_wal_senders = 20",
		"max_connections = 300",
		"fsync = on",
		"wal_sender_timeout = 5s",
	} {
		if !strings.Contains(conf, "\n"+line+"\n") {
			t.Errorf("postgresql.conf lacks %q", line)
		}
	}
}

func TestEmbeddedFiles(t *testing.T) {
	pom, err := local.Files.ReadFile("pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<packaging>pom</packaging>", "<artifactId>kafka_2.13</artifactId>", "<artifactId>log4j-slf4j-impl</artifactId>"} {
		if !strings.Contains(string(pom), s) {
			t.Errorf("pom.xml lacks %s", s)
		}
	}
	for _, name := range []string{"server.properties", "log4j2.xml", "postgresql.conf", "pg_hba.conf"} {
		if _, err := local.Files.ReadFile(name); err != nil {
			t.Errorf("embedded %s: %v", name, err)
		}
	}
	if len(pomHash(pom)) != 64 || pomHash(pom) == pomHash(append(pom, ' ')) {
		t.Error("pomHash does not tell poms apart")
	}
}

func TestKafkaClusterID(t *testing.T) {
	// Kafka parses the id as 16 bytes of unpadded base64url: 22 characters.
	if len(kafkaClusterID) != 22 {
		t.Errorf("cluster id %q has %d characters, want 22", kafkaClusterID, len(kafkaClusterID))
	}
}

func parseProperties(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m
}

func TestRenderRefusesAMissingPlaceholder(t *testing.T) {
	for _, name := range []string{"server.properties", "cluster-server.properties", "postgresql.conf"} {
		if b, err := render(name, map[string]string{}); err == nil || !strings.Contains(err.Error(), "rendering "+name) {
			t.Errorf("%s without its values: error %v (output %q), want a rendering error", name, err, b)
		}
	}
	if _, err := render("no-such-file.conf", nil); err == nil {
		t.Error("rendered a template that is not embedded")
	}
}
