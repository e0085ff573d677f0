package localstack_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testkit"
)

// TestPostgresVersionsSideBySide starts PostgreSQL 15, 16 and 18 (the
// npm-installed programs; 17 runs in the testenv standby tests) in one state
// dir without Kafka, each in its own data dir, checks each server's version
// and the settings logical replication needs, checks Status, and that one
// Down stops them all.
func TestPostgresVersionsSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	log := testLogger(t)
	dir := stackDir(t)
	downAtCleanup(t, localstack.Config{StateDir: dir, PGVersion: 15}, log)

	versions := []int{15, 16, 18}
	ports := testkit.FreePorts(t, len(versions)+2)
	var cfgs []localstack.Config
	for i, v := range versions {
		cfg := localstack.Config{StateDir: dir, PGVersion: v, PGPort: ports[i], KafkaPort: ports[len(versions)],
			KafkaControllerPort: ports[len(versions)+1], PostgresOnly: true}
		cfgs = append(cfgs, cfg)
		begin := time.Now()
		res, err := localstack.Up(ctx, cfg, log)
		if err != nil {
			t.Fatalf("up %d: %v", v, err)
		}
		t.Logf("up %d took %v", v, time.Since(begin).Round(time.Millisecond))
		if !res.StartedPostgres || res.StartedKafka || res.KafkaBootstrap != "" {
			t.Errorf("up %d: started postgres=%v kafka=%v bootstrap=%q, want postgres only", v, res.StartedPostgres, res.StartedKafka, res.KafkaBootstrap)
		}
		if res.PGVersion != v {
			t.Errorf("up %d: endpoints report version %d", v, res.PGVersion)
		}
		checkPostgres(ctx, t, res.Endpoints)
		checkServer(ctx, t, res.AdminDSN, v)
	}
	wantData := map[int]string{15: "pg/data", 16: "pg16/data", 18: "pg18/data"}
	for _, v := range versions {
		b, err := os.ReadFile(filepath.Join(dir, wantData[v], "PG_VERSION"))
		if err != nil || string(b) != strconv.Itoa(v)+"\n" {
			t.Errorf("%s/PG_VERSION = %q, %v; want %d", wantData[v], b, err, v)
		}
	}
	for i, cfg := range cfgs {
		st, err := localstack.Status(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Postgres.Running || st.PGVersion != versions[i] {
			t.Errorf("status of %d: running=%v version=%d", versions[i], st.Postgres.Running, st.PGVersion)
		}
	}
	if left := processesMentioning(dir); len(left) < len(versions) {
		t.Fatalf("%d processes run in the state dir, want at least one postmaster per version: %v", len(left), left)
	}

	// One Down, with whichever version, stops every server of the state dir.
	if err := localstack.Down(ctx, cfgs[0], log); err != nil {
		t.Fatalf("down: %v", err)
	}
	if left := processesMentioning(dir); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
}

// checkServer checks the server's major version and the settings the CDC
// reader and a standby rely on.
func checkServer(ctx context.Context, t *testing.T, adminDSN string, major int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Fatalf("connecting as admin: %v", err)
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	if num/10000 != major {
		t.Errorf("server_version_num = %d, want major %d", num, major)
	}
	want := map[string]string{
		"wal_level":             "logical",
		"max_replication_slots": "20",
		"max_wal_senders":       "20",
		"fsync":                 "on",
		"listen_addresses":      "127.0.0.1",
	}
	for name, v := range want {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if got != v {
			t.Errorf("PostgreSQL %d: %s = %q, want %q", major, name, got, v)
		}
	}
	// pgoutput loads: a logical slot with it can be created and dropped.
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot('version_check', 'pgoutput')"); err != nil {
		t.Fatalf("PostgreSQL %d: creating a pgoutput slot: %v", major, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot('version_check')"); err != nil {
		t.Fatal(err)
	}
}
