// Package metrics serves Prometheus metrics. Components declare their
// metrics as package-level collectors registered with the default Prometheus
// registry (promauto), so `eventforge dev`, which runs every component in one
// process, exposes them all on one endpoint. Labels never carry order or
// event IDs: their value sets must not grow with traffic.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the default registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.Handler()
}

// Serve exposes /metrics on addr until ctx is cancelled, with /healthz and
// /readyz answering 200 while the process serves (the probes of
// deploy/kubernetes). An empty addr disables it. ready, if not nil, receives the bound address.
func Serve(ctx context.Context, addr string, logger *slog.Logger, ready chan<- string) error {
	return ServeReady(ctx, addr, logger, ready, nil)
}

// ServeReady is Serve with /readyz answering 503 with the error's text while
// readiness returns an error (nil readiness: always ready).
func ServeReady(ctx context.Context, addr string, logger *slog.Logger, ready chan<- string, readiness func() error) error {
	if addr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler())
	up := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}
	mux.HandleFunc("GET /healthz", up)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if readiness != nil {
			if err := readiness(); err != nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_ = json.NewEncoder(w).Encode(map[string]string{"status": "unavailable", "reason": err.Error()})
				return
			}
		}
		up(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("metrics listening", "metrics_addr", lis.Addr().String())
	if ready != nil {
		ready <- lis.Addr().String()
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving metrics: %w", err)
	}
	return nil
}
