package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var testCounter = promauto.NewCounter(prometheus.CounterOpts{Name: "eventforge_test_metrics_total", Help: "Test counter."})

func TestServe(t *testing.T) {
	testCounter.Add(3)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	addr := <-ready
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "eventforge_test_metrics_total 3") {
		t.Fatalf("metric missing from /metrics:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel", err)
	}
	if err := Serve(ctx, "", nil, nil); err != nil {
		t.Fatalf("disabled Serve: %v", err)
	}
}
