package localstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testkit"
)

// TestUpDown starts a private stack on free ports in its own state dir,
// checks both services for real, checks that Up is idempotent under
// concurrency, and that Down leaves no process behind.
func TestUpDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	log := testLogger(t)
	dir := stackDir(t)
	ports := testkit.FreePorts(t, 3)
	cfg := localstack.Config{
		StateDir:            dir,
		PGPort:              ports[0],
		KafkaPort:           ports[1],
		KafkaControllerPort: ports[2],
	}
	downAtCleanup(t, cfg, log)

	begin := time.Now()
	res, err := localstack.Up(ctx, cfg, log)
	if err != nil {
		t.Fatalf("first up: %v", err)
	}
	t.Logf("first up took %v", time.Since(begin))
	if !res.StartedPostgres || !res.StartedKafka {
		t.Errorf("first up: started postgres=%v kafka=%v, want both true", res.StartedPostgres, res.StartedKafka)
	}
	wantDSN := fmt.Sprintf("postgres://eventforge:eventforge@127.0.0.1:%d/eventforge?sslmode=disable", cfg.PGPort)
	if res.PostgresDSN != wantDSN {
		t.Errorf("postgres dsn = %q, want %q", res.PostgresDSN, wantDSN)
	}
	if want := "127.0.0.1:" + strconv.Itoa(cfg.KafkaPort); res.KafkaBootstrap != want {
		t.Errorf("kafka bootstrap = %q, want %q", res.KafkaBootstrap, want)
	}

	checkPostgres(ctx, t, res.Endpoints)
	checkTopic(ctx, t, res.KafkaBootstrap, localstack.DefaultTopic, localstack.DefaultTopicPartitions)

	// Two more Ups at once: the lock serialises them and both find the
	// services running.
	var wg sync.WaitGroup
	again := make([]localstack.Result, 2)
	errs := make([]error, 2)
	begin = time.Now()
	for i := range again {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again[i], errs[i] = localstack.Up(ctx, cfg, log)
		}()
	}
	wg.Wait()
	t.Logf("two concurrent second ups took %v", time.Since(begin))
	for i := range again {
		if errs[i] != nil {
			t.Fatalf("second up %d: %v", i, errs[i])
		}
		if again[i].StartedPostgres || again[i].StartedKafka {
			t.Errorf("second up %d: started postgres=%v kafka=%v, want both false", i, again[i].StartedPostgres, again[i].StartedKafka)
		}
		if again[i].Endpoints != res.Endpoints {
			t.Errorf("second up %d: endpoints %+v, want %+v", i, again[i].Endpoints, res.Endpoints)
		}
	}

	st, err := localstack.Status(ctx, cfg)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if !st.Postgres.Running || !st.Kafka.Running {
		t.Fatalf("status: %+v, want both running", st)
	}
	t.Logf("kafka pid %d rss %d MiB; postmaster pid %d rss %d MiB",
		st.Kafka.PID, st.Kafka.RSSBytes>>20, st.Postgres.PID, st.Postgres.RSSBytes>>20)
	procs := append(localstack.Descendants(st.Postgres.PID), st.Postgres.PID, st.Kafka.PID)

	if err := localstack.Down(ctx, cfg, log); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, pid := range procs {
		if localstack.Alive(pid) {
			t.Errorf("pid %d (%s) still running after down", pid, localstack.Cmdline(pid))
		}
	}
	if left := processesMentioning(dir); len(left) > 0 {
		t.Errorf("processes still mention the state dir after down: %v", left)
	}
	st, err = localstack.Status(ctx, cfg)
	if err != nil {
		t.Fatalf("status after down: %v", err)
	}
	if st.Postgres.Running || st.Kafka.Running || st.Postgres.PID != 0 || st.Kafka.PID != 0 {
		t.Errorf("status after down: %+v, want nothing running", st)
	}
	if err := localstack.Down(ctx, cfg, log); err != nil {
		t.Errorf("second down: %v", err)
	}
}

func checkPostgres(ctx context.Context, t *testing.T, ep localstack.Endpoints) {
	t.Helper()
	conn, err := pgx.Connect(ctx, ep.PostgresDSN)
	if err != nil {
		t.Fatalf("connecting to %s: %v", ep.PostgresDSN, err)
	}
	defer conn.Close(ctx)
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatalf("show wal_level: %v", err)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}
	var repl, createdb bool
	var user, db string
	err = conn.QueryRow(ctx, "SELECT rolreplication, rolcreatedb, current_user, current_database() FROM pg_roles WHERE rolname = current_user").
		Scan(&repl, &createdb, &user, &db)
	if err != nil {
		t.Fatalf("reading role: %v", err)
	}
	if !repl || !createdb || user != "eventforge" || db != "eventforge" {
		t.Errorf("role %s in %s: replication=%v createdb=%v, want eventforge in eventforge with both", user, db, repl, createdb)
	}

	// A replication connection as the application role works over TCP.
	rc, err := pgx.Connect(ctx, ep.PostgresDSN+"&replication=database")
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	rc.Close(ctx)

	admin, err := pgx.Connect(ctx, ep.AdminDSN)
	if err != nil {
		t.Fatalf("connecting as superuser: %v", err)
	}
	defer admin.Close(ctx)
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || !super {
		t.Errorf("admin dsn superuser = %v, %v; want true", super, err)
	}
}

func checkTopic(ctx context.Context, t *testing.T, bootstrap, topic string, partitions int) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	desc, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}))
	if err != nil {
		t.Fatalf("describing %s: %v", topic, err)
	}
	if len(desc.TopicDescriptions) != 1 {
		t.Fatalf("described %d topics, want 1", len(desc.TopicDescriptions))
	}
	d := desc.TopicDescriptions[0]
	if d.Error.Code() != kafka.ErrNoError {
		t.Fatalf("topic %s: %v", topic, d.Error)
	}
	if len(d.Partitions) != partitions {
		t.Errorf("topic %s has %d partitions, want %d", topic, len(d.Partitions), partitions)
	}
	md, err := a.GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	if n := len(md.Topics[topic].Partitions); n != partitions {
		t.Errorf("metadata of %s shows %d partitions, want %d", topic, n, partitions)
	}
}

// processesMentioning lists live processes whose command line holds s.
func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cl := localstack.Cmdline(pid); strings.Contains(cl, s) && localstack.Alive(pid) {
			out = append(out, fmt.Sprintf("%d: %s", pid, cl))
		}
	}
	return out
}

// testLogger logs to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// stackDir makes a state dir for a private stack (testkit.StackDir).
func stackDir(t *testing.T) string {
	return testkit.StackDir(t, "eventforge-test-")
}

// downAtCleanup stops what cfg's stack runs when the test ends and removes
// its state dir, which a failed test keeps for inspection.
func downAtCleanup(t *testing.T, cfg localstack.Config, log *slog.Logger) {
	t.Cleanup(func() {
		if err := localstack.Down(context.Background(), cfg, log); err != nil {
			t.Errorf("cleanup down: %v", err)
		}
		if t.Failed() {
			t.Logf("state dir kept for inspection: %s", cfg.StateDir)
			return
		}
		os.RemoveAll(cfg.StateDir)
	})
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestUpRefusesForeignPort checks that Up names a port held by another
// process and starts nothing.
func TestUpRefusesForeignPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	dir := stackDir(t)
	t.Cleanup(func() { os.RemoveAll(dir) })

	ports := testkit.FreePorts(t, 3)
	tests := []struct {
		name  string
		taken int
		want  string
	}{
		{"postgres port", ports[0], "starting postgres: port " + strconv.Itoa(ports[0])},
		{"kafka port", ports[1], "starting kafka: port " + strconv.Itoa(ports[1])},
		{"controller port", ports[2], "starting kafka: port " + strconv.Itoa(ports[2])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(tt.taken))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cfg := localstack.Config{StateDir: dir, PGPort: ports[0], KafkaPort: ports[1], KafkaControllerPort: ports[2]}
			_, err = localstack.Up(ctx, cfg, log)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "in use") {
				t.Fatalf("Up = %v, want error containing %q", err, tt.want)
			}
			if left := processesMentioning(dir); len(left) > 0 {
				t.Errorf("Up started processes despite the taken port: %v", left)
			}
		})
	}
}
