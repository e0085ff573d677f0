package localstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/localstack"
)

// TestMonitorRunsOnceAndDownStopsIt: Monitor starts one real Prometheus per
// state dir (a second call finds it), Status reports it, and Down stops it
// with the rest of the stack.
func TestMonitorRunsOnceAndDownStopsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := testLogger(t)
	cfg := localstack.Config{StateDir: stackDir(t)}
	downAtCleanup(t, cfg, log)

	first, err := localstack.Monitor(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	again, err := localstack.Monitor(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Started || again.Started || again.URL != first.URL || first.Dir != localstack.MonitorDir(cfg.StateDir) {
		t.Errorf("monitor twice: %+v, then %+v; want one start, one URL, in %s", first, again, localstack.MonitorDir(cfg.StateDir))
	}
	rep, err := localstack.Status(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Prometheus.Running || rep.PrometheusURL != first.URL {
		t.Errorf("status: prometheus %+v at %q, want running at %s", rep.Prometheus, rep.PrometheusURL, first.URL)
	}
	if err := localstack.Down(ctx, cfg, log); err != nil {
		t.Fatal(err)
	}
	if localstack.Alive(rep.Prometheus.PID) {
		t.Errorf("prometheus (pid %d) still runs after down", rep.Prometheus.PID)
	}
	if rep, err = localstack.Status(ctx, cfg); err != nil || rep.Prometheus.Running || rep.PrometheusURL != "" {
		t.Errorf("status after down: %+v, %v", rep.Prometheus, err)
	}
}
