// Package api is EventForge's order service: gRPC OrderService, the REST
// gateway in front of it, gRPC health and reflection, HTTP health endpoints
// and the OpenAPI document. Every change to an order is written together with
// its outbox event in one PostgreSQL transaction (package store).
package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
	"github.com/eventforge/eventforge/internal/tlsconf"
)

// Config configures the order service.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `name:"grpc-addr" help:"gRPC listen address." default:"127.0.0.1:9090"`
	// HTTPAddr is the REST gateway and health listen address.
	HTTPAddr string `name:"http-addr" help:"HTTP (REST gateway, /healthz, /readyz) listen address." default:"127.0.0.1:8080"`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size." default:"16"`
	// CreateWriters bounds the transactions of creates without an
	// idempotency key written at once; creates that arrive while they are
	// all busy share the next one's commit (api/store group commit).
	CreateWriters int `name:"create-writers" help:"Transactions of creates without an idempotency key written at once; creates arriving while all are busy share the next one's commit. 1 is the cheapest per order; more raise the ceiling of one PostgreSQL backend." default:"1"`
	// ShutdownTimeout bounds the graceful drain of in-flight requests.
	ShutdownTimeout time.Duration `name:"shutdown-timeout" help:"How long shutdown waits for in-flight requests." default:"10s"`
	// RequestTimeout caps every call's deadline (a shorter client deadline
	// wins); the deadline bounds the call's database work.
	RequestTimeout time.Duration `name:"request-timeout" help:"Longest time one request may take, database work included; shorter client deadlines win." default:"10s"`
	// IdempotencyWindow is how long CreateOrder idempotency keys are kept at
	// least; older keys are pruned.
	IdempotencyWindow time.Duration `name:"idempotency-window" help:"How long CreateOrder idempotency keys are kept before they are pruned." default:"24h"`
	// PruneInterval is how often expired idempotency keys are deleted.
	PruneInterval time.Duration `name:"prune-interval" help:"How often expired idempotency keys are deleted." default:"1m"`
	// ReadTimeout bounds reading one HTTP request, headers and body, so a
	// client that sends its body slowly cannot hold a handler forever.
	ReadTimeout time.Duration `name:"http-read-timeout" help:"Longest time to read one HTTP request, body included (a slower request is answered 408)." default:"30s"`
	// WriteTimeout bounds one HTTP request from the end of its headers to
	// the end of its response; it must exceed RequestTimeout.
	WriteTimeout time.Duration `name:"http-write-timeout" help:"Longest time from the end of an HTTP request's headers to the end of its response; must exceed --request-timeout." default:"30s"`
	// IdleTimeout bounds how long an idle keep-alive HTTP connection stays
	// open. gRPC connections are not HTTP/1 server connections and keep
	// their own keepalive settings.
	IdleTimeout time.Duration `name:"http-idle-timeout" help:"How long an idle keep-alive HTTP connection is kept open." default:"2m"`
	// PageTokenKey signs ListOrders page tokens (HMAC-SHA256), so a forged
	// or altered token is refused. Every api replica behind one load
	// balancer needs the same key; when empty, each process draws a random
	// key and tokens do not survive a restart or a move to another replica.
	PageTokenKey string `name:"page-token-key" log:"secret" help:"Secret (at least 32 bytes) that signs ListOrders page tokens; the same on every replica. Empty: a random key per process."`
	// TLSCertFile and TLSKeyFile, when set, serve gRPC and HTTP over TLS.
	TLSCertFile string `name:"tls-cert-file" help:"PEM certificate (chain) to serve gRPC and HTTP over TLS; with --tls-key-file. Empty: plaintext."`
	TLSKeyFile  string `name:"tls-key-file" help:"PEM private key of --tls-cert-file."`
	// Handlers are extra HTTP handlers mounted by pattern, e.g. the
	// console's "/ui/" and "/api/ops/"; set by the command, not by flags.
	Handlers map[string]http.Handler `kong:"-"`
}

// MaxRequestBytes bounds a request: a larger REST body gets 413 and a larger
// gRPC message RESOURCE_EXHAUSTED, and nothing is written.
const MaxRequestBytes = 1 << 20

// ServiceName is the gRPC service name, also the grpc.health.v1 service
// whose status follows the database's reachability (readiness); the empty
// service name answers SERVING while the process serves (liveness).
const ServiceName = "eventforge.v1.OrderService"

// DefaultConfig returns the configuration the flags default to (their
// tags, read by config.Defaults).
func DefaultConfig() Config {
	return config.Defaults[Config]()
}

// LogValue is the configuration as the startup line shows it: every flag,
// secrets masked (logging.ConfigValue).
func (c Config) LogValue() slog.Value { return logging.ConfigValue(c) }

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
	if c.CreateWriters <= 0 || c.CreateWriters > int(c.MaxConns) {
		errs = append(errs, errors.New("create-writers must be between 1 and max-conns"))
	}
	if c.RequestTimeout <= 0 || c.IdempotencyWindow <= 0 || c.PruneInterval <= 0 {
		errs = append(errs, errors.New("request-timeout, idempotency-window and prune-interval must be positive"))
	}
	if c.ReadTimeout <= 0 || c.IdleTimeout <= 0 {
		errs = append(errs, errors.New("http-read-timeout and http-idle-timeout must be positive"))
	}
	if c.WriteTimeout <= c.RequestTimeout {
		errs = append(errs, fmt.Errorf("http-write-timeout (%s) must exceed request-timeout (%s), or REST answers would be cut off", c.WriteTimeout, c.RequestTimeout))
	}
	if n := len(c.PageTokenKey); n > 0 && n < rpc.MinPageTokenKeyLen {
		errs = append(errs, fmt.Errorf("page-token-key must be at least %d bytes, got %d", rpc.MinPageTokenKeyLen, n))
	}
	return errors.Join(errs...)
}

// Addrs are the addresses the service listens on.
type Addrs struct{ GRPC, HTTP string }

// An Option adds to what Run does beyond its Config.
type Option func(*options)

type options struct {
	ready chan<- Addrs
}

// NotifyReady makes Run send the bound addresses on ready once both
// listeners are up (useful when the configured ports are 0). Run sends
// once, and waits until the value is taken or fits in ready's buffer; a nil
// ready is no notification.
func NotifyReady(ready chan<- Addrs) Option {
	return func(o *options) { o.ready = ready }
}

// Run composes the service — the gRPC server (grpc.go), the REST gateway
// that calls it (gateway.go) and the HTTP server in front of the gateway
// (http.go), over one store — and serves until ctx is cancelled, then
// drains in-flight requests.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
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
	st := store.New(pool, store.WithCreateWriters(cfg.CreateWriters))

	lis, err := listen(cfg)
	if err != nil {
		return err
	}
	grpcServer, healthServer := newGRPCServer(ctx, cfg, st, lis.serverTLS, logger)
	gw, conn, err := newGateway(ctx, lis.grpc.Addr().String(), lis.selfTLS)
	if err != nil {
		lis.close()
		return err
	}
	defer conn.Close()
	httpServer, err := newHTTPServer(cfg, st, gw, logger)
	if err != nil {
		lis.close()
		return err
	}

	addrs := Addrs{GRPC: lis.grpc.Addr().String(), HTTP: lis.http.Addr().String()}
	logger.Info("api listening", "grpc_addr", addrs.GRPC, "http_addr", addrs.HTTP)
	if o.ready != nil {
		o.ready <- addrs
	}
	s := servers{cfg: cfg, logger: logger, st: st, lis: lis, grpc: grpcServer, health: healthServer, http: httpServer}
	err = s.serve(ctx)
	logger.Info("api stopped")
	return err
}

// listeners are the service's bound sockets and its TLS settings.
type listeners struct {
	grpc, http net.Listener
	// serverTLS is nil without TLS; selfTLS is what the gateway dials the
	// gRPC server with.
	serverTLS, selfTLS *tls.Config
}

// listen binds the gRPC and HTTP addresses; the HTTP listener speaks TLS
// when a certificate is configured.
func listen(cfg Config) (*listeners, error) {
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.GRPCAddr, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return nil, fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	serverTLS, selfTLS, err := tlsconf.Server(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return nil, err
	}
	if serverTLS != nil {
		httpLis = tls.NewListener(httpLis, serverTLS)
	}
	return &listeners{grpc: grpcLis, http: httpLis, serverTLS: serverTLS, selfTLS: selfTLS}, nil
}

// close closes both listeners of a service that will not serve.
func (l *listeners) close() {
	l.grpc.Close()
	l.http.Close()
}

// servers are the service's servers over one store.
type servers struct {
	cfg    Config
	logger *slog.Logger
	st     *store.Store
	lis    *listeners
	grpc   *grpc.Server
	health *health.Server
	http   *http.Server
}

// serve runs the servers, the idempotency-key pruning and the health
// refresh until ctx ends, then shuts the servers down within the shutdown
// timeout: HTTP first, then gRPC (gracefully, or at once when the time is
// up).
func (s servers) serve(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.lis.grpc); err != nil {
			return fmt.Errorf("serving grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.http.Serve(s.lis.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		pruneKeys(gctx, s.st, s.cfg.IdempotencyWindow, s.cfg.PruneInterval, s.logger)
		return nil
	})
	g.Go(func() error {
		keepHealth(gctx, s.st, s.health)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		s.shutdown(ctx)
		return nil
	})
	return g.Wait()
}

// shutdown stops the servers once ctx (the service's context) has ended.
func (s servers) shutdown(ctx context.Context) {
	s.health.Shutdown()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.logger.Warn("http shutdown", "err", err)
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		s.grpc.Stop()
	}
}
