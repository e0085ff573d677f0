package api

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/internal/tlsconf"
	"github.com/eventforge/eventforge/internal/tracing"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// newGRPCServer builds the gRPC server: OrderService, health (its statuses
// set once from a database ping) and reflection, with the request log and
// the deadline cap on every call. It warns when ListOrders page tokens are
// signed with a key of this process only.
func newGRPCServer(ctx context.Context, cfg Config, st *store.Store, serverTLS *tls.Config, logger *slog.Logger) (*grpc.Server, *health.Server) {
	grpcServer := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Calls run on long-lived worker goroutines whose stacks have
		// already grown to what a call needs, instead of a new goroutine
		// per call that grows (copies) its stack on every call.
		grpc.NumStreamWorkers(streamWorkers),
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
	return grpcServer, healthServer
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
		if id := orderIDOf(req, resp, err); id != "" {
			attrs = append(attrs, slog.String("order_id", id))
		}
		level := slog.LevelInfo
		if code == codes.Internal || code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Unknown {
			level = slog.LevelWarn
		}
		logger.LogAttrs(ctx, level, "rpc", attrs...)
		return resp, err
	}
}

// orderIDOf returns the order ID a response, an error (the ErrorInfo of a
// failed create or cancel) or a request carries.
func orderIDOf(req, resp any, err error) string {
	if r, ok := resp.(interface{ GetOrder() *eventforgev1.Order }); ok && r.GetOrder() != nil {
		return r.GetOrder().GetOrderId()
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == rpc.ErrorDomain && info.GetMetadata()[rpc.MetadataOrderID] != "" {
			return info.GetMetadata()[rpc.MetadataOrderID]
		}
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

// keepHealth refreshes the health statuses every healthInterval until ctx
// ends.
func keepHealth(ctx context.Context, st *store.Store, hs *health.Server) {
	ticker := time.NewTicker(healthInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			updateHealth(ctx, st, hs)
		}
	}
}

// streamWorkers is how many calls run on reused goroutines at once: as
// many as one create group holds (a call beyond it gets a goroutine of its
// own, as without workers). Idle workers cost their stacks, a few KiB each.
const streamWorkers = 64
