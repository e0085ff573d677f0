package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// readyz reports whether addr's /readyz answers 200.
func readyz(addr string) (bool, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// windowUnhealthyLeader: two readers on one slot; the leader's route to
// Kafka is a blackhole (connections accepted, nothing answered), the
// standby reaches Kafka. Events committed then wait on the leader; it gives
// up the leadership after --unhealthy-after and the standby publishes them
// within --unhealthy-after + 10 s of their commit. The leader's /readyz is
// not ready from then on while it holds off, the standby's is; nothing is
// lost and verify passes.
func windowUnhealthyLeader(t *testing.T) {
	const unhealthyAfter = 10 * time.Second
	env := testenv.New(t)
	kafka := testenv.NewBlackhole(t, env.Endpoints.KafkaBootstrap)
	kafka.Block()
	flags := []string{"--unhealthy-after", unhealthyAfter.String(), "--flush-timeout", "2s"}
	leader, leaderMetrics := cdcReader(t, env, "cdc-leader", nil, append([]string{"--kafka-brokers", kafka.Addr()}, flags...)...)
	waitMetric(t, leaderMetrics, "eventforge_cdc_active", 30*time.Second, "the reader without Kafka leads", func(v float64) bool { return v == 1 })
	standby, standbyMetrics := cdcReader(t, env, "cdc-standby", nil, flags...)
	testenv.Eventually(t, 30*time.Second, "second reader waits as standby", func() error {
		if !strings.Contains(standby.tail(50), "waiting as standby") {
			return fmt.Errorf("no standby line in %s", standby.Log)
		}
		return nil
	})
	if ok, err := readyz(leaderMetrics); err != nil || !ok {
		t.Fatalf("leader /readyz before any event waits: ready %v (%v), want ready", ok, err)
	}

	ctx := context.Background()
	// One transaction per event (each of its own order): verify orders
	// events of one order by commit, which one transaction does not give.
	var ids []string
	for range 20 {
		ids = append(ids, insertEvents(ctx, t, env.Pool, 1, 1)...)
	}
	committed := time.Now()
	t.Log("20 events committed; the leader cannot reach Kafka")
	testenv.Eventually(t, unhealthyAfter+10*time.Second, "the leader's /readyz not ready", func() error {
		if ok, err := readyz(leaderMetrics); err != nil || ok {
			return fmt.Errorf("ready %v (%v)", ok, err)
		}
		return nil
	})
	// The acceptance bound: the standby publishes within
	// --unhealthy-after + 10 s of the events' commit.
	waitEventsInKafka(t, env, ids, unhealthyAfter+10*time.Second-time.Since(committed))
	published := time.Since(committed)
	if v, _ := scrape(standbyMetrics, "eventforge_cdc_active"); v != 1 {
		t.Errorf("standby active = %v after publishing, want 1", v)
	}
	if ok, err := readyz(leaderMetrics); err != nil || ok {
		t.Errorf("the old leader's /readyz while it holds off: ready %v (%v), want not ready", ok, err)
	}
	if ok, err := readyz(standbyMetrics); err != nil || !ok {
		t.Errorf("the new leader's /readyz: ready %v (%v), want ready", ok, err)
	}
	if v, _ := scrape(leaderMetrics, "eventforge_cdc_active"); v != 0 {
		t.Errorf("old leader active = %v, want 0", v)
	}
	if n := logCount(t, leader.Log, "leadership released: this reader cannot publish; a standby may take over"); n == 0 {
		t.Error("the leader did not log giving up the leadership")
	}
	t.Logf("standby published every event %.1f s after the commit (bound %s)", published.Seconds(), unhealthyAfter+10*time.Second)

	// The standby keeps publishing, each order's events in commit order,
	// past the old leader's hold-off; the old leader, still without Kafka,
	// stays a standby.
	l := startLoad(env.Pool, 5, 20*time.Millisecond)
	waitMetric(t, standbyMetrics, "eventforge_cdc_events_published_total", time.Minute, "the new leader publishing the load", func(v float64) bool { return v >= 200 })
	commits, errs := l.stop()
	t.Logf("load: %d commits, %d errors", commits, errs)
	waitDelivered(t, env, 2*time.Minute)
	verifyRelayOnly(t, &pipeline{env: env})
}
