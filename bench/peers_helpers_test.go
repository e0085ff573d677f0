package bench

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"

	"github.com/eventforge/eventforge/internal/testenv"
)

// peerTestEvents is the backlog of a peer's drain test: 500 events, or the
// positive number in the environment variable name, to measure a larger
// drain by hand.
func peerTestEvents(t *testing.T, name string) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return 500
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// peerTestRunner is a runner on the test's stack and database, as the peers
// phase has one, with its logs in logDir and warnings only.
func peerTestRunner(te *testenv.Env, logDir string) *runner {
	return &runner{
		env:    &env{endpoints: te.Endpoints, database: te.Database, dsn: te.DatabaseURL, pool: te.Pool},
		logDir: logDir, logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		res: &Results{},
	}
}

// preparePeerTest gives relay a database of its own (dropped when the test
// ends) readied by its Prepare, a run named "test" with its slot, made
// before the backlog, and its topic (deleted when the test ends), and
// commits events order transactions into the database.
func preparePeerTest(ctx context.Context, t *testing.T, r *runner, relay peerRelay, name string, events int) (*peerDB, peerRun) {
	t.Helper()
	db, err := r.createPeerDB(ctx, name)
	if db != nil {
		t.Cleanup(func() { r.dropPeerDB(context.WithoutCancel(ctx), db) })
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Prepare(ctx, db); err != nil {
		t.Fatal(err)
	}
	run := newPeerRun(db, relay.Traits(), "test")
	if run.slot != "" {
		if _, err := db.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, run.slot); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.env.createTopic(ctx, run.topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.env.deleteTopics(run.topic) })
	if err := commitOrders(ctx, db.dsn, r.logDir, events); err != nil {
		t.Fatal(err)
	}
	return db, run
}
