// Package api is EventForge's order service: gRPC OrderService, the REST
// gateway in front of it, and health endpoints. Every CreateOrder writes the
// order and its outbox event in one PostgreSQL transaction (package store).
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/internal/metrics"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Config configures the order service.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" help:"PostgreSQL connection URL." default:"postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable"`
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `name:"grpc-addr" help:"gRPC listen address." default:"127.0.0.1:9090"`
	// HTTPAddr is the REST gateway and health listen address.
	HTTPAddr string `name:"http-addr" help:"HTTP (REST gateway, /healthz, /readyz) listen address." default:"127.0.0.1:8080"`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size." default:"16"`
	// ShutdownTimeout bounds the graceful drain of in-flight requests.
	ShutdownTimeout time.Duration `name:"shutdown-timeout" help:"How long shutdown waits for in-flight requests." default:"10s"`
}

// DefaultConfig returns the configuration the flags default to.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:     "postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable",
		GRPCAddr:        "127.0.0.1:9090",
		HTTPAddr:        "127.0.0.1:8080",
		MaxConns:        16,
		ShutdownTimeout: 10 * time.Second,
	}
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("database-url is required"))
	}
	if c.GRPCAddr == "" || c.HTTPAddr == "" {
		errs = append(errs, errors.New("grpc-addr and http-addr are required"))
	}
	if c.MaxConns <= 0 || c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("max-conns and shutdown-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Run serves until ctx is cancelled, then drains in-flight requests.
// ready, if not nil, receives the bound addresses once both listeners are up.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return run(ctx, cfg, logger, nil)
}

// Addrs are the addresses the service listens on.
type Addrs struct{ GRPC, HTTP string }

// RunNotify is Run that reports the bound addresses on ready (useful when the
// configured ports are 0).
func RunNotify(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- Addrs) error {
	return run(ctx, cfg, logger, ready)
}

func run(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- Addrs) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid api config: %w", err)
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("parsing database-url: %w", err)
	}
	poolCfg.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("creating postgres pool: %w", err)
	}
	defer pool.Close()
	st := store.New(pool)

	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.GRPCAddr, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}

	grpcServer := grpc.NewServer(grpc.ChainUnaryInterceptor(logRequests(logger)))
	eventforgev1.RegisterOrderServiceServer(grpcServer, rpc.New(st, logger))

	conn, err := grpc.NewClient(grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return fmt.Errorf("dialing own grpc server: %w", err)
	}
	defer conn.Close()
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{},
		}}),
	)
	if err := eventforgev1.RegisterOrderServiceHandler(ctx, gw, conn); err != nil {
		grpcLis.Close()
		httpLis.Close()
		return fmt.Errorf("registering gateway: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := st.Ping(pctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable","reason":"database unreachable"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", metrics.Handler())
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(eventforgev1.OpenAPI)
	})
	httpServer := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	addrs := Addrs{GRPC: grpcLis.Addr().String(), HTTP: httpLis.Addr().String()}
	logger.Info("api listening", "grpc_addr", addrs.GRPC, "http_addr", addrs.HTTP)
	if ready != nil {
		ready <- addrs
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := grpcServer.Serve(grpcLis); err != nil {
			return fmt.Errorf("serving grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := httpServer.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := httpServer.Shutdown(sctx); err != nil {
			logger.Warn("http shutdown", "err", err)
		}
		stopped := make(chan struct{})
		go func() { grpcServer.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			grpcServer.Stop()
		}
		return nil
	})
	err = g.Wait()
	logger.Info("api stopped")
	return err
}

// logRequests logs one line per call: method, code, duration.
func logRequests(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		logger.LogAttrs(ctx, slog.LevelInfo, "rpc",
			slog.String("method", info.FullMethod),
			slog.String("code", status.Code(err).String()),
			slog.Duration("duration", time.Since(start)))
		return resp, err
	}
}
