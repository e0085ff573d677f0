package rpc

import (
	"context"
	"crypto/rand"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// traceContext is the W3C Trace Context propagator (traceparent, tracestate).
var traceContext = propagation.TraceContext{}

// traceHeaders returns the W3C trace context of this API call as outbox
// headers ("traceparent" and, when present, "tracestate"). The call's span is
// the one in ctx when instrumentation started one; otherwise it is a new span
// ID that continues the caller's traceparent (gRPC metadata, or the HTTP
// header the gateway forwards) or, without one, starts a new sampled trace.
func traceHeaders(ctx context.Context) map[string]string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		carrier := propagation.MapCarrier{}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, k := range traceContext.Fields() {
			if v := md.Get(k); len(v) > 0 {
				carrier[k] = v[0]
			}
		}
		parent := trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
		cfg := trace.SpanContextConfig{SpanID: newSpanID(), TraceFlags: trace.FlagsSampled}
		if parent.IsValid() {
			cfg.TraceID, cfg.TraceFlags, cfg.TraceState = parent.TraceID(), parent.TraceFlags(), parent.TraceState()
		} else {
			cfg.TraceID = newTraceID()
		}
		sc = trace.NewSpanContext(cfg)
	}
	out := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
	return out
}

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id
}
