// Package profiling serves Go's runtime profiles (the handlers of
// net/http/pprof) on a listener of their own, off unless an address is
// given. Profiles expose memory contents and stack traces, so the address
// belongs on loopback or behind an operator-only network.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Handler serves /debug/pprof/ and its sub-pages.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Listen binds addr, so that a caller learns a bad address before it starts
// its work. An empty addr returns a nil listener.
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for profiles on %s: %w", addr, err)
	}
	return lis, nil
}

// Serve answers profile requests on lis until ctx ends. A nil lis does
// nothing.
func Serve(ctx context.Context, lis net.Listener, logger *slog.Logger) error {
	if lis == nil {
		return nil
	}
	// No write timeout: /debug/pprof/profile?seconds=N answers after N seconds.
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("profiles listening", "pprof_addr", lis.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving profiles: %w", err)
	}
	return nil
}
