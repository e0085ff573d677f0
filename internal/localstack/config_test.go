package localstack

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testkit"
)

func TestDefaultConfig(t *testing.T) {
	t.Setenv(StateDirEnv, "/var/tmp/ef-env")
	t.Setenv(PGVersionEnv, "")
	c := DefaultConfig()
	if c.StateDir != "/var/tmp/ef-env" || c.PGVersion != 15 || c.PGPort != 54329 || c.KafkaPort != 19092 || c.KafkaControllerPort != 19093 {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if len(c.Topics) != 1 || c.Topics[0] != (TopicSpec{Name: contract.Topic, Partitions: 6}) {
		t.Errorf("default topics = %+v", c.Topics)
	}
	// The flags of every component default to the default stack.
	if ep := c.endpoints("secret"); ep.PostgresDSN != contract.DatabaseURL || ep.KafkaBootstrap != contract.KafkaBrokers {
		t.Errorf("endpoints %s, %s; the flags default to %s, %s", ep.PostgresDSN, ep.KafkaBootstrap, contract.DatabaseURL, contract.KafkaBrokers)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}

	t.Setenv(StateDirEnv, "")
	if d := DefaultConfig().StateDir; !strings.HasPrefix(d, "/var/tmp/eventforge-") || len(d) != len("/var/tmp/eventforge-")+12 {
		t.Errorf("default state dir without env = %q", d)
	}

	empty := Config{Topics: []TopicSpec{}}.withDefaults()
	if len(empty.Topics) != 0 {
		t.Errorf("explicit empty topics became %+v", empty.Topics)
	}
}

func TestPGVersionDefaults(t *testing.T) {
	tests := []struct {
		env      string
		cfg      Config
		wantVer  int
		wantPort int
		wantErr  string
	}{
		{"", Config{}, 15, 54329, ""},
		{"17", Config{}, 17, 54317, ""},
		{"16", Config{}, 16, 54316, ""},
		{"18", Config{}, 18, 54318, ""},
		{"18", Config{PGVersion: 15}, 15, 54329, ""},
		{"", Config{PGVersion: 17, PGPort: 6000}, 17, 6000, ""},
		{"14", Config{}, 14, 54314, "postgresql 14 is not supported"},
		{"seventeen", Config{}, -1, 54299, `EVENTFORGE_PG_VERSION="seventeen" is not a PostgreSQL major version`},
	}
	for _, tt := range tests {
		t.Run(tt.env+"/"+strconv.Itoa(tt.cfg.PGVersion), func(t *testing.T) {
			t.Setenv(PGVersionEnv, tt.env)
			tt.cfg.StateDir = "/var/tmp/x"
			c := tt.cfg.withDefaults()
			if c.PGVersion != tt.wantVer || c.PGPort != tt.wantPort {
				t.Errorf("version %d port %d, want %d %d", c.PGVersion, c.PGPort, tt.wantVer, tt.wantPort)
			}
			if err := c.Validate(); !testkit.ErrorContains(err, tt.wantErr) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestLayoutPerVersion(t *testing.T) {
	if got := newLayoutFor("/var/tmp/s", 15).pgData; got != "/var/tmp/s/pg/data" {
		t.Errorf("15 data dir = %s, want the layout stacks already have", got)
	}
	l := newLayoutFor("/var/tmp/s", 17)
	for _, p := range []string{l.pgData, l.pgRun, l.pgLog, l.pgCtlLog, l.pgReady, l.pgPwFile, l.pgHBA, l.pgPIDFile, l.pgVersionFn} {
		if !strings.HasPrefix(p, "/var/tmp/s/pg17/") {
			t.Errorf("17: %s is outside /var/tmp/s/pg17", p)
		}
	}
	if l.kafkaData != newLayout("/var/tmp/s").kafkaData || l.adminPassword != "/var/tmp/s/admin.password" {
		t.Error("versions do not share the broker and the admin password")
	}
}

func TestStateDirFor(t *testing.T) {
	// sha256("/work/main") starts with f2af6c097ab8.
	if got := stateDirFor("/work/main"); got != "/var/tmp/eventforge-f2af6c097ab8" {
		t.Errorf("stateDirFor = %q", got)
	}
	if stateDirFor("/a") == stateDirFor("/b") {
		t.Error("different checkouts share a state dir")
	}
}

func TestRepoRoot(t *testing.T) {
	tests := []struct {
		name   string
		dir    string
		gomods []string
		want   string
	}{
		{"go.mod in dir", "/src/app", []string{"/src/app/go.mod"}, "/src/app"},
		{"go.mod above", "/src/app/internal/x", []string{"/src/app/go.mod"}, "/src/app"},
		{"nearest wins", "/src/app/tools/gen", []string{"/src/app/go.mod", "/src/app/tools/go.mod"}, "/src/app/tools"},
		{"none falls back to dir", "/src/app/x", nil, "/src/app/x"},
		{"unclean dir", "/src/app/x/../y/", []string{"/src/app/go.mod"}, "/src/app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exists := func(p string) bool {
				for _, g := range tt.gomods {
					if p == g {
						return true
					}
				}
				return false
			}
			if got := repoRoot(tt.dir, exists); got != tt.want {
				t.Errorf("repoRoot(%q) = %q, want %q", tt.dir, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Setenv(PGVersionEnv, "")
	ok := Config{StateDir: "/var/tmp/x"}.withDefaults()
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"relative state dir", func(c *Config) { c.StateDir = "state" }, "not an absolute path"},
		{"socket path too long", func(c *Config) { c.StateDir = "/" + strings.Repeat("d", 100) }, "too long"},
		{"port out of range", func(c *Config) { c.KafkaPort = 70000 }, "kafka port 70000 is out of range"},
		{"negative port", func(c *Config) { c.PGPort = -1 }, "pg port -1"},
		{"same ports", func(c *Config) { c.KafkaControllerPort = c.KafkaPort }, "ports must differ"},
		{"empty topic name", func(c *Config) { c.Topics = []TopicSpec{{Partitions: 1}} }, "empty name"},
		{"zero partitions", func(c *Config) { c.Topics = []TopicSpec{{Name: "t"}} }, "partitions 0"},
		{"duplicate topic", func(c *Config) { c.Topics = []TopicSpec{{"t", 1}, {"t", 2}} }, "listed twice"},
		{"no topics", func(c *Config) { c.Topics = []TopicSpec{} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			if err := c.Validate(); !testkit.ErrorContains(err, tt.wantErr) {
				t.Errorf("Validate() = %v, want an error containing %q (none if empty)", err, tt.wantErr)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	c := Config{StateDir: "/var/tmp/x", PGVersion: 17, PGPort: 5555, KafkaPort: 9999}.withDefaults()
	tests := []struct {
		name     string
		password string
		want     Endpoints
	}{
		{"with admin password", "s3cret", Endpoints{
			PostgresDSN:    "postgres://eventforge:eventforge@127.0.0.1:5555/eventforge?sslmode=disable",
			AdminDSN:       "postgres://postgres:s3cret@127.0.0.1:5555/postgres?sslmode=disable",
			KafkaBootstrap: "127.0.0.1:9999",
			PGVersion:      17,
		}},
		{"before the cluster exists", "", Endpoints{
			PostgresDSN:    "postgres://eventforge:eventforge@127.0.0.1:5555/eventforge?sslmode=disable",
			AdminDSN:       "postgres://postgres@127.0.0.1:5555/postgres?sslmode=disable",
			KafkaBootstrap: "127.0.0.1:9999",
			PGVersion:      17,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.endpoints(tt.password); got != tt.want {
				t.Errorf("endpoints() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLayoutStaysInStateDir(t *testing.T) {
	l := newLayout("/var/tmp/s")
	for _, p := range []string{l.lock, l.adminPassword, l.pgData, l.pgRun, l.pgLog, l.pgCtlLog, l.pgHBA, l.pgPIDFile,
		l.kafkaPom, l.kafkaLibs, l.kafkaData, l.kafkaLogs, l.kafkaOut, l.kafkaPID, l.kafkaProps, l.kafkaLog4j, l.kafkaFormat} {
		if rel, err := filepath.Rel(l.root, p); err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("%s is outside the state dir", p)
		}
	}
}
