package e2e

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// The relay's windows with and without --exactly-once, counting the
// duplicate records a read_committed reader (testenv.ReadTopic) finds.
// Without the mode each window may duplicate (that is the at-least-once
// contract); with it, none may.

// eosWindow runs one relay window in a mode (extra flags of every reader)
// and returns what the topic holds.
type eosWindow struct {
	name string
	run  func(t *testing.T, flags []string) deliveryCheck
}

var eosWindows = []eosWindow{
	{"relay crash after the Kafka ack", eosCrashAfterAck},
	{"standby takeover under load", eosTakeover},
	{"slot dropped under load (gap recovery)", eosGapRecovery},
	{"broker restart under load", eosBrokerRestart},
}

// eosRuns is how often each window runs in each mode:
// EVENTFORGE_EOS_RUNS, default 1 (`make test-exactly-once` runs 3).
func eosRuns(t *testing.T) int {
	n := 1
	if v := os.Getenv("EVENTFORGE_EOS_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("EVENTFORGE_EOS_RUNS=%q: want a positive integer", v)
		}
	}
	return n
}

// TestRelayExactlyOnce runs each relay window in both modes: with
// --exactly-once a read_committed reader finds no duplicate record, every
// event once and each order's events in commit order; without it the
// duplicates the window makes are counted and shown.
func TestRelayExactlyOnce(t *testing.T) {
	runs := eosRuns(t)
	for _, w := range eosWindows {
		t.Run(w.name, func(t *testing.T) {
			for _, mode := range []struct {
				name  string
				flags []string
			}{{"at-least-once", nil}, {"exactly-once", []string{"--exactly-once"}}} {
				total, passed := 0, 0
				for i := range runs {
					t.Run(fmt.Sprintf("%s/run-%d", mode.name, i+1), func(t *testing.T) {
						c := w.run(t, mode.flags)
						total += c.Duplicates
						if mode.flags != nil && c.Duplicates != 0 {
							t.Errorf("exactly-once: %d duplicate records for a read_committed reader, want 0", c.Duplicates)
						}
						if !t.Failed() {
							passed++
						}
					})
				}
				t.Logf("%s, %s: %d/%d runs passed, %d duplicate records in all", w.name, mode.name, passed, runs, total)
			}
		})
	}
}

// eosCrashAfterAck: the reader dies (SIGKILL) right after the sink
// acknowledged its first records — after the Kafka commit in exactly-once
// mode — before it confirmed them to the slot; a new reader resumes.
func eosCrashAfterAck(t *testing.T, flags []string) deliveryCheck {
	env := testenv.New(t)
	l := startLoad(env.Pool, 20, 20*time.Millisecond)
	crashing, _ := cdcReader(t, env, "cdc-crashing", []string{"EVENTFORGE_FAILPOINTS=" + failpoint.CDCAfterAckBeforeConfirm + "=crash"}, flags...)
	if err := crashing.waitExit(60 * time.Second); err == nil || !crashing.killedBySIGKILL() {
		t.Fatalf("reader with the armed failpoint: exit %v, want death by SIGKILL", err)
	}
	_, metrics := cdcReader(t, env, "cdc-restarted", nil, flags...)
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", time.Minute, "the restarted reader publishing", func(v float64) bool { return v >= 50 })
	l.stop()
	return waitDelivered(t, env, 2*time.Minute)
}

// eosTakeover: two readers of one slot under load; the publishing one is
// SIGKILLed and the standby takes over.
func eosTakeover(t *testing.T, flags []string) deliveryCheck {
	env := testenv.New(t)
	active, activeMetrics := cdcReader(t, env, "cdc-a", nil, flags...)
	waitMetric(t, activeMetrics, "eventforge_cdc_active", 30*time.Second, "first reader active", func(v float64) bool { return v == 1 })
	_, standbyMetrics := cdcReader(t, env, "cdc-b", nil, flags...)
	l := startLoad(env.Pool, 50, 2*time.Millisecond)
	waitMetric(t, activeMetrics, "eventforge_cdc_events_published_total", time.Minute, "first reader publishing", func(v float64) bool { return v >= 500 })
	if err := active.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitMetric(t, standbyMetrics, "eventforge_cdc_active", time.Minute, "standby took over", func(v float64) bool { return v == 1 })
	t.Logf("takeover %.2f s after SIGKILL", time.Since(killed).Seconds())
	waitMetric(t, standbyMetrics, "eventforge_cdc_events_published_total", time.Minute, "standby publishing under load", func(v float64) bool { return v >= 200 })
	l.stop()
	return waitDelivered(t, env, 2*time.Minute)
}

// eosGapRecovery: under load the reader's slot is dropped between its
// reconnects; the reader recreates it and republishes the gap.
func eosGapRecovery(t *testing.T, flags []string) deliveryCheck {
	env := testenv.New(t)
	pl := &pipeline{env: env}
	_, metrics := cdcReader(t, env, "cdc", nil, append(append([]string{}, gapFlags...), flags...)...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	l := startLoad(env.Pool, 50, 2*time.Millisecond)
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", time.Minute, "publishing", func(v float64) bool { return v >= 500 })
	waitCheckpointed(t, pl)
	dropSlotUnderReader(t, pl)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap recovered", func(v float64) bool { return v >= 1 })
	_, republished := gapRecoveries(t, metrics)
	published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", time.Minute, "publishing after the recovery", func(v float64) bool { return v >= published+200 })
	l.stop()
	t.Logf("gap recovery settled %v events", republished)
	return waitDelivered(t, env, 2*time.Minute)
}

// eosBrokerRestart: on a private stack, the broker is stopped under load
// and started again.
func eosBrokerRestart(t *testing.T, flags []string) deliveryCheck {
	stack := testenv.NewPrivate(t)
	env := stack.Env(t)
	_, metrics := cdcReader(t, env, "cdc", nil, append([]string{"--max-backoff", "2s"}, flags...)...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	l := startLoad(env.Pool, 50, 5*time.Millisecond)
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", time.Minute, "publishing", func(v float64) bool { return v >= 300 })
	stack.StopKafka(t)
	time.Sleep(3 * time.Second) // orders commit while the broker is down
	stack.Start(t)
	published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", 3*time.Minute, "publishing after the broker restart", func(v float64) bool { return v >= published+200 })
	l.stop()
	return waitDelivered(t, env, 3*time.Minute)
}
