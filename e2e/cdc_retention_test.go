package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// outboxRowsOf counts the outbox rows among ids.
func outboxRowsOf(t testing.TB, env *testenv.Env, ids []string) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE id::text = ANY($1)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitEventsInKafka waits until every event of ids is in env's topic.
func waitEventsInKafka(t testing.TB, env *testenv.Env, ids []string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "every event in Kafka", func() error {
		recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, r := range recs {
			got[r.Headers[contract.HeaderID]] = true
		}
		missing := 0
		for _, id := range ids {
			if !got[id] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d events not in Kafka", missing, len(ids))
		}
		return nil
	})
}

// TestCDCRetentionStall: with a retention of 2 s, the reader prunes what it
// published; then the only broker is frozen (SIGSTOP) for longer than the
// retention while events are written. No row of an event that was not
// published is deleted during the stall; after the resume every event is
// in Kafka, and only then are their rows pruned.
func TestCDCRetentionStall(t *testing.T) {
	c := startPrivateKafka(t, 1)
	env := testenv.NewOnCluster(t, c)
	ctx := context.Background()
	reader, _ := cdcReader(t, env, "cdc", nil, "--outbox-retention", "2s", "--outbox-prune-interval", "500ms", "--log-level", "debug")

	before := insertEvents(ctx, t, env.Pool, 20, 5)
	waitEventsInKafka(t, env, before, time.Minute)
	testenv.Eventually(t, time.Minute, "published rows pruned past the retention", func() error {
		if n := outboxRowsOf(t, env, before); n != 0 {
			return fmt.Errorf("%d of %d published rows left", n, len(before))
		}
		return nil
	})

	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker paused (SIGSTOP)")
	var during []string
	for range 10 {
		during = append(during, insertEvents(ctx, t, env.Pool, 3, 3)...)
	}
	paused := logCount(t, reader.Log, "outbox pruning paused: not publishing")
	// The length of the fault, not a wait for the system: the rows age
	// well past the retention while nothing can be published.
	time.Sleep(10 * time.Second)
	if n := outboxRowsOf(t, env, during); n != len(during) {
		t.Errorf("during the stall %d of %d unpublished rows were deleted", len(during)-n, len(during))
	}
	if more := logCount(t, reader.Log, "outbox pruning paused: not publishing") - paused; more == 0 {
		t.Error("the pruner never ran during the stall")
	}
	var oldest float64
	if err := env.Pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - min(created_at))::float8 FROM outbox WHERE id::text = ANY($1)`, during).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the stall the oldest unpublished row is %.1f s old (retention 2 s), every one kept", oldest)

	if err := c.Resume(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker resumed (SIGCONT)")
	waitEventsInKafka(t, env, append(before, during...), 2*time.Minute)
	testenv.Eventually(t, time.Minute, "rows pruned once published", func() error {
		if n := outboxRowsOf(t, env, during); n != 0 {
			return fmt.Errorf("%d of %d rows left", n, len(during))
		}
		return nil
	})
}
