// Package api is EventForge's order service: gRPC OrderService, the REST
// gateway in front of it, gRPC health and reflection, HTTP health endpoints
// and the OpenAPI document. Every change to an order is written together with
// its outbox event in one PostgreSQL transaction (package store).
package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/metrics"
	"github.com/eventforge/eventforge/internal/tlsconf"
	"github.com/eventforge/eventforge/internal/tracing"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Config configures the order service.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" help:"PostgreSQL connection URL." default:"${database_url}"`
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `name:"grpc-addr" help:"gRPC listen address." default:"127.0.0.1:9090"`
	// HTTPAddr is the REST gateway and health listen address.
	HTTPAddr string `name:"http-addr" help:"HTTP (REST gateway, /healthz, /readyz) listen address." default:"127.0.0.1:8080"`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size." default:"16"`
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
	PageTokenKey string `name:"page-token-key" help:"Secret (at least 32 bytes) that signs ListOrders page tokens; the same on every replica. Empty: a random key per process."`
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

// DefaultConfig returns the configuration the flags default to.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:       contract.DatabaseURL,
		GRPCAddr:          "127.0.0.1:9090",
		HTTPAddr:          "127.0.0.1:8080",
		MaxConns:          16,
		ShutdownTimeout:   10 * time.Second,
		RequestTimeout:    10 * time.Second,
		IdempotencyWindow: 24 * time.Hour,
		PruneInterval:     time.Minute,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
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
	serverTLS, selfTLS, err := tlsconf.Server(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	if serverTLS != nil {
		httpLis = tls.NewListener(httpLis, serverTLS)
	}

	grpcServer := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Requests decode in their handlers (rpc.ServiceDesc) and streams
		// (rpc.StreamDecoding), so one that does not decode is
		// INVALID_ARGUMENT, not grpc-go's INTERNAL.
		grpc.ForceServerCodecV2(rpc.Codec()),
		grpc.Creds(tlsconf.ServerCredentials(serverTLS)),
		tracing.GRPCServerOption(),
		grpc.ChainUnaryInterceptor(logRequests(logger), capDeadline(cfg.RequestTimeout)),
		grpc.ChainStreamInterceptor(rpc.StreamDecoding()),
	)
	var rpcOpts []rpc.Option
	if cfg.PageTokenKey != "" {
		rpcOpts = append(rpcOpts, rpc.WithPageTokenKey([]byte(cfg.PageTokenKey)))
	} else {
		logger.Warn("no page-token-key: ListOrders page tokens are signed with a random key of this process; " +
			"they fail after a restart and on other replicas; set the same EVENTFORGE_PAGE_TOKEN_KEY on every replica")
	}
	orderService := rpc.ServiceDesc(eventforgev1.OrderService_ServiceDesc)
	grpcServer.RegisterService(&orderService, rpc.New(st, logger, rpcOpts...))
	healthServer := health.NewServer()
	healthService := rpc.ServiceDesc(healthpb.Health_ServiceDesc)
	grpcServer.RegisterService(&healthService, healthServer)
	reflection.Register(grpcServer)
	updateHealth(ctx, st, healthServer)

	conn, err := grpc.NewClient(grpcLis.Addr().String(), grpc.WithTransportCredentials(tlsconf.ClientCredentials(selfTLS)), tracing.GRPCDialOption())
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return fmt.Errorf("dialing own grpc server: %w", err)
	}
	defer conn.Close()
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, rpc.RESTMarshaler()),
		runtime.SetQueryParameterParser(rpc.QueryParser()),
		runtime.WithIncomingHeaderMatcher(forwardHeader),
	)
	if err := eventforgev1.RegisterOrderServiceHandler(ctx, gw, conn); err != nil {
		grpcLis.Close()
		httpLis.Close()
		return fmt.Errorf("registering gateway: %w", err)
	}
	openAPI, err := rpc.OpenAPI()
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return fmt.Errorf("building the OpenAPI document: %w", err)
	}
	routes, err := declaredRoutes(openAPI)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", tracing.HTTPHandler(routes.allowMethods(routes.requireUTF8(limitBody(gw, MaxRequestBytes, logger))), "rest"))
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
		_, _ = w.Write(openAPI)
	})
	for pattern, h := range cfg.Handlers {
		mux.Handle(pattern, h)
	}
	httpServer := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}

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
		pruneKeys(gctx, st, cfg.IdempotencyWindow, cfg.PruneInterval, logger)
		return nil
	})
	g.Go(func() error {
		ticker := time.NewTicker(healthInterval)
		defer ticker.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-ticker.C:
				updateHealth(gctx, st, healthServer)
			}
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		healthServer.Shutdown()
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

// logRequests logs one line per call: method, code, duration and, when the
// request or response names one, order_id. REST calls pass through it too
// (the gateway calls the gRPC server).
func logRequests(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		attrs := []slog.Attr{
			slog.String("method", info.FullMethod),
			slog.String("code", code.String()),
			slog.Duration("duration", time.Since(start)),
		}
		if id := orderIDOf(req, resp); id != "" {
			attrs = append(attrs, slog.String("order_id", id))
		}
		level := slog.LevelInfo
		if code == codes.Internal || code == codes.Unavailable || code == codes.DeadlineExceeded {
			level = slog.LevelWarn
		}
		logger.LogAttrs(ctx, level, "rpc", attrs...)
		return resp, err
	}
}

// orderIDOf returns the order ID a response or request carries.
func orderIDOf(req, resp any) string {
	if r, ok := resp.(interface{ GetOrder() *eventforgev1.Order }); ok && r.GetOrder() != nil {
		return r.GetOrder().GetOrderId()
	}
	if r, ok := req.(interface{ GetOrderId() string }); ok {
		return r.GetOrderId()
	}
	return ""
}

// capDeadline bounds every call by max; an earlier client deadline stays.
// The context carries the deadline down to the database driver, which
// cancels the running statement when it passes.
func capDeadline(maxDuration time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, maxDuration)
		defer cancel()
		return handler(ctx, req)
	}
}

// forwardHeader passes the idempotency key and the W3C trace context from
// REST requests to the gRPC call's metadata, besides the gateway's default
// set.
func forwardHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case rpc.IdempotencyKeyMetadata, "traceparent", "tracestate":
		return k, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// limitBody refuses request bodies larger than limit with 413 and a
// google.rpc.Status body, and a body not received within the server's read
// timeout with 408; the gateway then decodes the buffered body. It also
// refuses with 400 an Idempotency-Key the gateway could not forward.
func limitBody(next http.Handler, limit int64, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			tooLarge(w, r, limit, logger)
			return
		}
		for _, key := range r.Header.Values(rpc.IdempotencyKeyHeader) {
			if strings.ContainsFunc(key, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
				// gRPC metadata cannot carry it: the gateway would drop it.
				if err := rpc.KeyHeaderError(key); err != nil {
					writeStatus(w, http.StatusBadRequest, status.Convert(err))
					return
				}
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			var netErr net.Error
			switch {
			case errors.As(err, &netErr) && netErr.Timeout():
				logger.LogAttrs(r.Context(), slog.LevelInfo, "http request refused",
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", http.StatusRequestTimeout))
				writeStatus(w, http.StatusRequestTimeout, status.New(codes.DeadlineExceeded, "the request body was not received in time"))
				return
			case err != nil:
				writeStatus(w, http.StatusBadRequest, status.New(codes.InvalidArgument, "reading the request body failed"))
				return
			}
			if int64(len(body)) > limit {
				tooLarge(w, r, limit, logger)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter, r *http.Request, limit int64, logger *slog.Logger) {
	logger.LogAttrs(r.Context(), slog.LevelInfo, "http request refused",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", http.StatusRequestEntityTooLarge), slog.Int64("content_length", r.ContentLength))
	writeStatus(w, http.StatusRequestEntityTooLarge,
		status.New(codes.ResourceExhausted, fmt.Sprintf("the request body is larger than %d bytes", limit)))
}

// writeStatus writes st as the gateway writes errors: a google.rpc.Status in
// JSON with proto field names.
func writeStatus(w http.ResponseWriter, httpStatus int, st *status.Status) {
	body, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"internal error","details":[]}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// healthInterval is how often the readiness status of ServiceName is
// refreshed from a database ping.
const healthInterval = 5 * time.Second

// updateHealth sets the liveness status ("") to SERVING and the readiness
// status (ServiceName) from a database ping.
func updateHealth(ctx context.Context, st *store.Store, hs *health.Server) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if err := st.Ping(pctx); err != nil {
		hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
		return
	}
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// pruneBatch is how many expired idempotency keys one DELETE removes.
const pruneBatch = 1000

// pruneKeys deletes idempotency keys older than window every interval until
// ctx ends. Several api processes may prune at once: DELETE is idempotent.
func pruneKeys(ctx context.Context, st *store.Store, window, interval time.Duration, logger *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := st.PruneIdempotencyKeys(ctx, window, pruneBatch)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("pruning idempotency keys", "err", err)
		case n > 0:
			logger.Info("idempotency keys pruned", "deleted", n, "window", window)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
