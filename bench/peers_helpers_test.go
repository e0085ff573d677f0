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
// ends) readied by its Prepare, creates its topic (deleted when the test
// ends) and commits events order transactions into the database.
func preparePeerTest(ctx context.Context, t *testing.T, r *runner, relay peerRelay, name string, events int) (*peerDB, string) {
	t.Helper()
	db, err := r.createPeerDB(ctx, name)
	if db != nil {
		t.Cleanup(func() { r.dropPeerDB(context.WithoutCancel(ctx), db) })
	}
	if err != nil {
		t.Fatal(err)
	}
	topic, err := relay.Prepare(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.env.createTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.env.deleteTopics(topic) })
	if err := commitOrders(ctx, db.dsn, r.logDir, events); err != nil {
		t.Fatal(err)
	}
	return db, topic
}
