// Package localstack starts and stops the real services EventForge runs
// against on one machine: a private PostgreSQL cluster (15 by default; 16, 17
// or 18 on request) with logical decoding and a single-node Apache Kafka 4
// broker (KRaft), both listening on loopback and keeping all their state
// under one directory. Each PostgreSQL major version has its own cluster in
// the state dir; they share the broker.
//
// Up is idempotent and serialised by a file lock in the state dir, so tests
// in several processes may call it at once: the first starts what is missing,
// the others find it running.
package localstack

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/pgbin"
)

// Defaults of Config.
const (
	// StateDirEnv names the environment variable that overrides the default
	// state dir.
	StateDirEnv = "EVENTFORGE_STATE_DIR"
	// PGVersionEnv names the environment variable that sets the default
	// PostgreSQL major version.
	PGVersionEnv = "EVENTFORGE_PG_VERSION"
	// DefaultPGVersion is the PostgreSQL major version when neither
	// Config.PGVersion nor $EVENTFORGE_PG_VERSION says otherwise.
	DefaultPGVersion = pgbin.DefaultMajor
	// DefaultPGPort is the PostgreSQL port of DefaultPGVersion; other
	// versions default to DefaultPGPortFor.
	DefaultPGPort = 54329
	// DefaultKafkaPort is the Kafka client (PLAINTEXT) port.
	DefaultKafkaPort = 19092
	// DefaultKafkaControllerPort is the KRaft controller port.
	DefaultKafkaControllerPort = 19093
	// DefaultTopic is the topic the CDC reader publishes order events to.
	DefaultTopic = contract.Topic
	// DefaultTopicPartitions is the partition count of DefaultTopic.
	DefaultTopicPartitions = 6
)

// Application role and database created in the cluster.
const (
	appUser     = "eventforge"
	appPassword = "eventforge"
	appDatabase = "eventforge"
	adminUser   = "postgres"
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Config says where the stack keeps its state and which loopback ports it
// listens on. The zero value of a field means its default.
type Config struct {
	// StateDir holds the PostgreSQL cluster, the Kafka class path, data and
	// logs, pid files and the lock. Default: $EVENTFORGE_STATE_DIR, else
	// /var/tmp/eventforge-<first 12 hex digits of the SHA-256 of the
	// checkout's absolute path>. Every parent must be traversable by the
	// postgres system user when running as root.
	StateDir string
	// PGVersion is the PostgreSQL major version: 15 (Debian's package), 16,
	// 17 or 18 (pinned npm packages, see internal/pgbin). Each version has
	// its own data dir in the state dir. Default: $EVENTFORGE_PG_VERSION,
	// else 15.
	PGVersion int
	// PGPort is the PostgreSQL port on 127.0.0.1. Default
	// DefaultPGPortFor(PGVersion): 54329 for 15, 54300+N for N≥16, so that
	// the versions of one state dir can run side by side.
	PGPort int
	// PGSettings are postgresql.conf lines appended to the stack's settings
	// (deploy/local/postgresql.conf), rewritten at every start.
	PGSettings []string
	// PGClientNetworks are networks (CIDR) whose clients pg_hba.conf admits
	// beside loopback, written when the cluster is created: tests that run
	// a process in a network namespace of their own. The server also needs
	// to listen there (listen_addresses in PGSettings).
	PGClientNetworks []string
	// PostgresOnly starts PostgreSQL without Kafka: Up neither starts a
	// broker nor creates topics, and Endpoints.KafkaBootstrap is empty.
	PostgresOnly bool
	// KafkaPort is the Kafka client port on 127.0.0.1. Default 19092.
	KafkaPort int
	// KafkaControllerPort is the KRaft controller port on 127.0.0.1.
	// Default 19093.
	KafkaControllerPort int
	// Topics are created by Up when missing. Nil means one topic,
	// DefaultTopic with DefaultTopicPartitions partitions; an empty non-nil
	// slice creates none.
	Topics []TopicSpec
}

// TopicSpec describes a Kafka topic. The replication factor is always 1.
type TopicSpec struct {
	// Name is the topic name.
	Name string
	// Partitions is the partition count, at least 1.
	Partitions int
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{}.withDefaults()
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	if c.StateDir == "" {
		c.StateDir = defaultStateDir()
	}
	if c.PGVersion == 0 {
		c.PGVersion = pgVersionFromEnv()
	}
	if c.PGPort == 0 {
		c.PGPort = DefaultPGPortFor(c.PGVersion)
	}
	if c.KafkaPort == 0 {
		c.KafkaPort = DefaultKafkaPort
	}
	if c.KafkaControllerPort == 0 {
		c.KafkaControllerPort = DefaultKafkaControllerPort
	}
	if c.Topics == nil {
		c.Topics = []TopicSpec{{Name: DefaultTopic, Partitions: DefaultTopicPartitions}}
	}
	return c
}

// DefaultPGPortFor returns the default PostgreSQL port of a major version:
// DefaultPGPort for 15, 54300+major otherwise (54316, 54317, 54318).
func DefaultPGPortFor(major int) int {
	if major == DefaultPGVersion {
		return DefaultPGPort
	}
	return 54300 + major
}

// pgVersionFromEnv returns $EVENTFORGE_PG_VERSION, DefaultPGVersion when it
// is unset, or -1 when it is not a number (Validate reports it).
func pgVersionFromEnv() int {
	s := os.Getenv(PGVersionEnv)
	if s == "" {
		return DefaultPGVersion
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		return -1
	}
	return v
}

// Validate reports the first problem of a configuration whose defaults are
// filled in.
func (c Config) Validate() error {
	if !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("state dir %q is not an absolute path", c.StateDir)
	}
	if !pgbin.IsSupported(c.PGVersion) {
		if c.PGVersion < 0 {
			return fmt.Errorf("%s=%q is not a PostgreSQL major version (supported: %v)", PGVersionEnv, os.Getenv(PGVersionEnv), pgbin.Supported())
		}
		return fmt.Errorf("postgresql %d is not supported (supported: %v)", c.PGVersion, pgbin.Supported())
	}
	if sock := filepath.Join(newLayoutFor(c.StateDir, c.PGVersion).pgRun, ".s.PGSQL."+strconv.Itoa(c.PGPort)); len(sock) > maxSocketPath {
		return fmt.Errorf("state dir %q is too long: the socket path %s exceeds %d bytes", c.StateDir, sock, maxSocketPath)
	}
	ports := []struct {
		name string
		port int
	}{{"pg port", c.PGPort}, {"kafka port", c.KafkaPort}, {"kafka controller port", c.KafkaControllerPort}}
	for _, p := range ports {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s %d is out of range 1-65535", p.name, p.port)
		}
	}
	if c.PGPort == c.KafkaPort || c.PGPort == c.KafkaControllerPort || c.KafkaPort == c.KafkaControllerPort {
		return fmt.Errorf("ports must differ: pg %d, kafka %d, kafka controller %d", c.PGPort, c.KafkaPort, c.KafkaControllerPort)
	}
	seen := make(map[string]bool, len(c.Topics))
	for _, t := range c.Topics {
		if t.Name == "" {
			return errors.New("topic with an empty name")
		}
		if t.Partitions < 1 {
			return fmt.Errorf("topic %s: partitions %d, want at least 1", t.Name, t.Partitions)
		}
		if seen[t.Name] {
			return fmt.Errorf("topic %s listed twice", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// defaultStateDir implements the StateDir default.
func defaultStateDir() string {
	if d := os.Getenv(StateDirEnv); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "/"
	}
	return stateDirFor(repoRoot(cwd, fileExists))
}

// stateDirFor names the default state dir of the checkout at root.
func stateDirFor(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "/var/tmp/eventforge-" + hex.EncodeToString(sum[:])[:12]
}

// repoRoot returns the nearest directory at or above dir that holds a
// go.mod, or dir itself when there is none.
func repoRoot(dir string, exists func(string) bool) string {
	dir = filepath.Clean(dir)
	for d := dir; ; {
		if exists(filepath.Join(d, "go.mod")) {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

// Endpoints are the addresses clients use to reach the stack.
type Endpoints struct {
	// PostgresDSN connects as the application role eventforge (LOGIN,
	// REPLICATION, CREATEDB) to the database eventforge.
	PostgresDSN string
	// AdminDSN connects as the superuser postgres to the database postgres.
	AdminDSN string
	// PGVersion is the PostgreSQL major version of the server.
	PGVersion int
	// KafkaBootstrap is the broker's host:port.
	KafkaBootstrap string
}

// endpoints returns the endpoints of c; adminPassword may be empty when the
// cluster has not been created yet.
func (c Config) endpoints(adminPassword string) Endpoints {
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.PGPort))
	return Endpoints{
		PostgresDSN:    pgDSN(host, appUser, appPassword, appDatabase),
		AdminDSN:       pgDSN(host, adminUser, adminPassword, "postgres"),
		PGVersion:      c.PGVersion,
		KafkaBootstrap: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.KafkaPort)),
	}
}

func pgDSN(host, user, password, database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     host,
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	if password == "" {
		u.User = url.User(user)
	}
	return u.String()
}
