package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestCDCWaitsForStandbySlots: with --synchronized-standby-slots naming the
// physical slot of an (asynchronous) standby, the reader publishes nothing
// the standby has not flushed. The primary's walsender for the standby is
// frozen (SIGSTOP) while a transaction commits: the reader receives it and
// waits, says so, and publishes none of its events; once the walsender runs
// again, they are published. Then the same for a transaction larger than
// the in-flight bounds (--max-inflight-events 8, 12 events), which the reader
// cannot hold whole: it waits for the standby before producing any of it.
func TestCDCWaitsForStandbySlots(t *testing.T) {
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(15), testenv.WithoutKafka())
	env := stack.EnvOnSharedKafka(t)
	standby := stack.AddStandby(t)
	ctx := context.Background()

	reader, _ := cdcReader(t, env, "cdc", nil, "--synchronized-standby-slots", standby.Name, "--max-inflight-events", "8")
	first := insertEvents(ctx, t, env.Pool, 5, 5)
	waitEventsInKafka(t, env, first, time.Minute)

	var walsender int
	if err := env.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE application_name = $1`, standby.Name).Scan(&walsender); err != nil {
		t.Fatalf("finding the standby's walsender: %v", err)
	}
	heldBack := func(events int, logMsg string) {
		t.Helper()
		if err := syscall.Kill(walsender, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := syscall.Kill(walsender, syscall.SIGCONT); err != nil {
					t.Errorf("resuming the walsender: %v", err)
				}
			}
		}
		t.Cleanup(resume)
		ids := insertEvents(ctx, t, env.Pool, events, 5)
		testenv.Eventually(t, time.Minute, "reader says it waits for the standby", func() error {
			if logCount(t, reader.Log, logMsg) == 0 {
				return fmt.Errorf("no line %q in %s yet", logMsg, reader.Log)
			}
			return nil
		})
		recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			for _, id := range ids {
				if r.Headers[contract.HeaderID] == id {
					t.Fatalf("event %s was published before the standby flushed its commit", id)
				}
			}
		}
		resume()
		waitEventsInKafka(t, env, ids, time.Minute)
	}
	heldBack(5, "waiting for the standby slots to flush a commit before publishing it")
	heldBack(12, "transaction exceeds the in-flight bounds; publishing it once the standbys flushed the start of its commit record")
}

// TestCDCRefusesStandbysWithoutAChoice: on a primary with a standby and
// nothing that holds the relay back until the standby has a commit (no
// --synchronized-standby-slots, no synchronized_standby_slots on the
// server), the reader refuses to publish and says how to choose; with
// --synchronized-standby-slots none it publishes without waiting.
func TestCDCRefusesStandbysWithoutAChoice(t *testing.T) {
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(15), testenv.WithoutKafka())
	env := stack.EnvOnSharedKafka(t)
	stack.AddStandby(t)

	refused, _ := cdcReader(t, env, "cdc-unchosen", nil)
	if err := refused.waitExit(time.Minute); err == nil {
		t.Fatal("the reader exited 0, want a configuration error")
	}
	if out, err := os.ReadFile(refused.Log); err != nil || !strings.Contains(string(out), "this server has standbys") {
		t.Fatalf("the reader's output does not say why it refused (%v):\n%s", err, refused.tail(10))
	}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Fatalf("%d records published by a reader that refused", len(recs))
	}
	cdcReader(t, env, "cdc-none", nil, "--synchronized-standby-slots", "none")
	ids := insertEvents(context.Background(), t, env.Pool, 3, 3)
	waitEventsInKafka(t, env, ids, time.Minute)
}
