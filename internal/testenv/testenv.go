// Package testenv gives tests real services: the local PostgreSQL + Kafka
// stack (started if it is not running, reused if it is), and per-test
// isolation on it — a database, a replication slot, topics and consumer
// groups of its own, removed when the test ends.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/schema"
)

var (
	stackOnce sync.Once
	stack     localstack.Endpoints
	stackErr  error
)

// Stack starts the local stack if needed and returns its endpoints. It fails
// the test (never skips it) when the stack cannot start. PostgreSQL is the
// version $EVENTFORGE_PG_VERSION names (default 15; `make test PG=17` sets
// it), each version on its own port beside the one broker.
func Stack(t testing.TB) localstack.Endpoints {
	t.Helper()
	stackOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		var res localstack.Result
		res, stackErr = localstack.Up(ctx, localstack.DefaultConfig(), logger)
		stack = res.Endpoints
		if stackErr == nil {
			if err := reapOrphans(ctx, stack); err != nil {
				logger.Warn("dropping what ended test processes left on the stack", "err", err)
			}
		}
	})
	if stackErr != nil {
		t.Fatalf("starting local stack: %v", stackErr)
	}
	return stack
}

// Name returns a unique lower-case name with prefix, usable for databases,
// slots, topics and groups.
func Name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Env is one test's isolated slice of the stack.
type Env struct {
	Endpoints   localstack.Endpoints
	Database    string // database name
	DatabaseURL string // DSN of the test database as the eventforge role
	Slot        string // replication slot created by Migrate
	Topic       string // orders topic (6 partitions)
	Group       string // consumer group for the fulfillment consumer
	Pool        *pgxpool.Pool
	// ReplicationURL, when set, is the standby the relay decodes on (its
	// --replication-url) and SlotPool a pool there, where its slot is read
	// (DecodeOnStandby); otherwise the slot is on Pool's server.
	ReplicationURL string
	SlotPool       *pgxpool.Pool
}

// New creates a database with the schema migrated and the slot created, a
// 6-partition topic and a group name, all unique to the test and all removed
// at cleanup.
func New(t testing.TB) *Env {
	t.Helper()
	return newEnv(t, Stack(t), nil)
}

// NewOnCluster is New with the topic on a private multi-node Kafka cluster
// instead of the shared broker: replication factor = nodes,
// min.insync.replicas = nodes - 1. The database stays on the shared
// PostgreSQL.
func NewOnCluster(t testing.TB, c *localstack.KafkaCluster) *Env {
	t.Helper()
	ep := Stack(t)
	ep.KafkaBootstrap = c.Bootstrap
	return newEnv(t, ep, func(ctx context.Context, topic string) error {
		a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.Bootstrap, "log_level": 3})
		if err != nil {
			return err
		}
		defer a.Close()
		res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{
			Topic: topic, NumPartitions: 6, ReplicationFactor: c.Nodes(),
			Config: map[string]string{"min.insync.replicas": strconv.Itoa(max(1, c.Nodes()-1))},
		}}, kafka.SetAdminOperationTimeout(30*time.Second))
		if err != nil {
			return err
		}
		if res[0].Error.Code() != kafka.ErrNoError {
			return res[0].Error
		}
		return nil
	})
}

// newEnv creates the test's database, slot and topic on ep; createTopic,
// when set, replaces the default topic creation on the shared broker.
func newEnv(t testing.TB, ep localstack.Endpoints, createTopic func(ctx context.Context, topic string) error) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	id := Name(ownerPrefix("t"))
	e := &Env{
		Endpoints: ep,
		Database:  "ef" + id,
		Slot:      "ef" + id,
		Topic:     "ef" + id + ".orders",
		Group:     "ef" + id + "-fulfillment",
	}
	admin, err := pgx.Connect(ctx, ep.AdminDSN)
	if err != nil {
		t.Fatalf("connecting as admin: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s OWNER eventforge`, pgx.Identifier{e.Database}.Sanitize())); err != nil {
		t.Fatalf("creating database: %v", err)
	}
	t.Cleanup(func() { e.dropDatabase(t) })

	u, err := url.Parse(ep.PostgresDSN)
	if err != nil {
		t.Fatalf("parsing dsn: %v", err)
	}
	u.Path = "/" + e.Database
	e.DatabaseURL = u.String()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := schema.Migrate(ctx, e.DatabaseURL, logger); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	e.Pool, err = pgxpool.New(ctx, e.DatabaseURL)
	if err != nil {
		t.Fatalf("opening pool: %v", err)
	}
	if _, err := schema.EnsureSlot(ctx, e.Pool, e.Slot); err != nil {
		t.Fatalf("creating slot: %v", err)
	}
	if createTopic == nil {
		createTopic = func(ctx context.Context, topic string) error {
			return localstack.EnsureTopics(ctx, ep.KafkaBootstrap, []localstack.TopicSpec{{Name: topic, Partitions: 6}})
		}
	}
	if err := createTopic(ctx, e.Topic); err != nil {
		t.Fatalf("creating topic: %v", err)
	}
	t.Cleanup(func() { e.deleteTopic(t) })
	return e
}

func (e *Env) dropDatabase(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.Pool != nil {
		e.Pool.Close()
	}
	admin, err := pgx.Connect(ctx, e.Endpoints.AdminDSN)
	if err != nil {
		t.Errorf("cleanup: connecting as admin: %v", err)
		return
	}
	defer admin.Close(ctx)
	// A slot still held by a dying reader cannot be dropped; retry briefly.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = schema.DropSlotsIfExist(ctx, admin, e.Slot)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("cleanup: dropping slot %s: %v", e.Slot, err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, pgx.Identifier{e.Database}.Sanitize())); err != nil {
		t.Errorf("cleanup: dropping database %s: %v", e.Database, err)
	}
}

func (e *Env) deleteTopic(t testing.TB) {
	err := withAdmin(e.Endpoints.KafkaBootstrap, func(ctx context.Context, a *kafka.AdminClient) error {
		if _, err := a.DeleteTopics(ctx, []string{e.Topic}); err != nil {
			t.Errorf("cleanup: deleting topic %s: %v", e.Topic, err)
		}
		if _, err := a.DeleteConsumerGroups(ctx, []string{e.Group}); err != nil && !strings.Contains(err.Error(), "GROUP_ID_NOT_FOUND") {
			t.Logf("cleanup: deleting group %s: %v", e.Group, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// Eventually polls cond every 100 ms until it returns nil or timeout passes,
// then fails the test with the last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
