package e2e

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// windowStandbyTakeover: two readers for one slot under load. Exactly one
// publishes; when it is SIGKILLed the standby takes over. Nothing is lost,
// each order's events arrive in commit order in one partition, and at no
// sample do the readers' eventforge_cdc_active gauges sum to more than 1.
func windowStandbyTakeover(t *testing.T) {
	env := testenv.New(t)
	active, activeMetrics := cdcReader(t, env, "cdc-a", nil)
	waitMetric(t, activeMetrics, "eventforge_cdc_active", 30*time.Second, "first reader active", func(v float64) bool { return v == 1 })
	standby, standbyMetrics := cdcReader(t, env, "cdc-b", nil)
	testenv.Eventually(t, 30*time.Second, "second reader waits as standby", func() error {
		if !strings.Contains(standby.tail(50), "waiting as standby") {
			return fmt.Errorf("no standby line in %s", standby.Log)
		}
		return nil
	})

	// Sample both gauges, the standby's first: a sample in which both read
	// 1 means the killed reader was still active after the standby became
	// active.
	var (
		mu         sync.Mutex
		samples    int
		violations []string
		stop       = make(chan struct{})
		sampled    = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			b, _ := scrape(standbyMetrics, "eventforge_cdc_active")
			a, _ := scrape(activeMetrics, "eventforge_cdc_active")
			mu.Lock()
			samples++
			if a+b > 1 {
				violations = append(violations, fmt.Sprintf("%s: active gauges sum to %v", time.Now().Format(time.RFC3339Nano), a+b))
			}
			mu.Unlock()
		}
	}()

	l := startLoad(env.Pool, 50, 2*time.Millisecond)
	waitMetric(t, activeMetrics, "eventforge_cdc_events_published_total", 30*time.Second, "first reader publishing", func(v float64) bool { return v >= 500 })

	if err := active.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := active.waitExit(10 * time.Second); err == nil || !active.killedBySIGKILL() {
		t.Fatalf("first reader: exit %v, want death by SIGKILL", err)
	}
	waitMetric(t, standbyMetrics, "eventforge_cdc_active", time.Minute, "standby took over", func(v float64) bool { return v == 1 })
	takeover := time.Since(killed)
	// The load and the sampling go on while the standby publishes a
	// steady stream, not just its first event.
	mu.Lock()
	sampledBefore := samples
	mu.Unlock()
	waitMetric(t, standbyMetrics, "eventforge_cdc_events_published_total", time.Minute, "standby publishing under load", func(v float64) bool { return v >= 200 })
	testenv.Eventually(t, 30*time.Second, "gauges sampled while the standby publishes", func() error {
		mu.Lock()
		defer mu.Unlock()
		if samples < sampledBefore+10 {
			return fmt.Errorf("%d samples since the standby published, want 10", samples-sampledBefore)
		}
		return nil
	})
	commits, errs := l.stop()
	close(stop)
	<-sampled

	started := logTime(t, standby.Log, "replication started; this process publishes")
	if !started.After(killed) {
		t.Errorf("standby started publishing at %s, before the active reader was killed at %s", started.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano))
	}
	c := waitDelivered(t, env, 2*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("takeover %.2f s after SIGKILL (standby streaming %.2f s after it); %d commits under load (%d errors), %d gauge samples, %d duplicates",
		takeover.Seconds(), started.Sub(killed).Seconds(), commits, errs, samples, c.Duplicates)
	verifyRelayOnly(t, &pipeline{env: env})
}

// sessionEnds counts the reader's log lines saying its session or its
// control connection ended.
func sessionEnds(t testing.TB, p *proc) int {
	t.Helper()
	return logCount(t, p.Log, "cdc session ended; reconnecting", "cdc connection ended; reconnecting")
}

// windowBrokerAndPostgresRestarts runs on a private stack: under
// load, the Kafka broker is restarted, then PostgreSQL is stopped
// immediately (crash recovery) and restarted. The reader recovers by itself
// and every committed event reaches Kafka. While the broker is down the
// oldest-unpublished age rises; once the reader caught up it falls again.
func windowBrokerAndPostgresRestarts(t *testing.T) {
	stack := testenv.NewPrivate(t)
	env := stack.Env(t)
	reader, metrics := cdcReader(t, env, "cdc", nil, "--max-backoff", "2s")
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })

	l := startLoad(env.Pool, 50, 5*time.Millisecond)
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", 30*time.Second, "publishing", func(v float64) bool { return v >= 100 })

	stack.StopKafka(t)
	age := waitMetric(t, metrics, "eventforge_cdc_oldest_unpublished_age_seconds", 2*time.Minute, "age rises while Kafka is down", func(v float64) bool { return v >= 3 })
	t.Logf("oldest unpublished age reached %.1f s with the broker down", age)
	stack.Start(t)
	age = waitMetric(t, metrics, "eventforge_cdc_oldest_unpublished_age_seconds", 3*time.Minute, "age falls once caught up", func(v float64) bool { return v < 2 })
	t.Logf("oldest unpublished age back to %.2f s after the broker restart", age)
	published, _ := scrape(metrics, "eventforge_cdc_events_published_total")

	ended := sessionEnds(t, reader)
	stack.StopPostgres(t, true)
	testenv.Eventually(t, time.Minute, "reader noticed PostgreSQL gone", func() error {
		if n := sessionEnds(t, reader); n == ended {
			return fmt.Errorf("no session or connection end logged since the stop (%d before it)", ended)
		}
		return nil
	})
	stack.Start(t)
	waitMetric(t, metrics, "eventforge_cdc_events_published_total", 3*time.Minute, "publishing after the PostgreSQL restart", func(v float64) bool { return v >= published+100 })
	commits, errs := l.stop()

	select {
	case <-reader.Exited():
		t.Fatalf("reader exited: %v", reader.Err())
	default:
	}
	c := waitDelivered(t, env, 3*time.Minute)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active at the end", func(v float64) bool { return v == 1 })
	t.Logf("%d commits under load (%d failed during the restarts), %d duplicates", commits, errs, c.Duplicates)
	verifyRelayOnly(t, &pipeline{env: env})
}
