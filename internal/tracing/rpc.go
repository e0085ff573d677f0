package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// The three functions below choose their instrumentation by the tracer
// provider installed when they are called (Setup runs first in every
// process). With an exporter they use OpenTelemetry's instrumentation,
// which records spans with their attributes and its metrics. Without one
// (the id-only provider) nothing is recorded, so they only continue the
// caller's trace context and start a span that carries IDs: what handlers,
// log lines and outbox headers read. OpenTelemetry's instrumentation would
// cost the api CPU on every create for spans nobody receives.

// GRPCServerOption traces every gRPC call the server receives: one server
// span per call, continuing the caller's traceparent from the metadata.
// The span is in the handler's context, so what the handler stores or logs
// with that context carries its trace and span IDs.
func GRPCServerOption() grpc.ServerOption {
	if exporting() {
		return grpc.StatsHandler(otelgrpc.NewServerHandler())
	}
	return grpc.StatsHandler(idOnlyServerHandler{})
}

// GRPCDialOption traces outgoing gRPC calls and injects the caller's trace
// context into their metadata (the REST gateway's calls to the gRPC server).
func GRPCDialOption() grpc.DialOption {
	if exporting() {
		return grpc.WithStatsHandler(otelgrpc.NewClientHandler())
	}
	return grpc.WithStatsHandler(idOnlyClientHandler{})
}

// HTTPHandler traces every request h serves: one server span named
// operation, continuing the traceparent header when the request has one.
func HTTPHandler(h http.Handler, operation string) http.Handler {
	if exporting() {
		return otelhttp.NewHandler(h, operation)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := Tracer().Start(ctx, operation, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// exporting reports whether the installed tracer provider may record spans:
// anything but the id-only provider of a process without an exporter.
func exporting() bool {
	_, idOnly := otel.GetTracerProvider().(*idOnlyProvider)
	return !idOnly
}

// noStats is the part of a stats.Handler the id-only handlers leave
// empty: nothing per connection, nothing after a call starts.
type noStats struct{}

func (noStats) HandleRPC(context.Context, stats.RPCStats) {}

func (noStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (noStats) HandleConn(context.Context, stats.ConnStats) {}

// idOnlyServerHandler starts each call's span from the trace context in
// the incoming metadata, reading only the propagator's keys.
type idOnlyServerHandler struct{ noStats }

func (idOnlyServerHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	ctx = propagator.Extract(ctx, incomingMetadata{ctx})
	ctx, _ = Tracer().Start(ctx, info.FullMethodName, trace.WithSpanKind(trace.SpanKindServer))
	return ctx
}

// idOnlyClientHandler starts a client span for each call and sends its
// trace context in the outgoing metadata.
type idOnlyClientHandler struct{ noStats }

func (idOnlyClientHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	ctx, _ = Tracer().Start(ctx, info.FullMethodName, trace.WithSpanKind(trace.SpanKindClient))
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	propagator.Inject(ctx, outgoingMetadata(md)) // replaces the keys it sets
	return metadata.NewOutgoingContext(ctx, md)
}

// incomingMetadata reads a call's incoming metadata as a propagation
// carrier without copying it (metadata.FromIncomingContext copies it all).
type incomingMetadata struct{ ctx context.Context }

func (c incomingMetadata) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incomingMetadata) Set(string, string) {}

func (c incomingMetadata) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// outgoingMetadata is a call's outgoing metadata as a propagation carrier.
type outgoingMetadata metadata.MD

func (c outgoingMetadata) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c outgoingMetadata) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c outgoingMetadata) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
