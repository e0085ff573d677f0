package tracing

import (
	"context"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// idOnlyProvider is the tracer provider of a process that exports nothing.
// Its spans record nothing, but each has a span context of its own: a new
// span ID, the parent's trace ID and sampling decision (or, for a new
// trace, a new trace ID sampled by the configured ratio). So trace IDs
// still propagate through outbox headers and Kafka records and appear in
// log lines, a downstream process that does export still sees the trace,
// and no span is ever built, attributed or buffered for nobody: recording
// spans that nothing exports was a large share of the CDC reader's CPU and
// allocations (docs/bench.md, *Tracing without an exporter*).
type idOnlyProvider struct {
	embedded.TracerProvider
	sampler sdktrace.Sampler
}

func newIDOnlyProvider(ratio float64) *idOnlyProvider {
	return &idOnlyProvider{sampler: sdktrace.TraceIDRatioBased(ratio)}
}

func (p *idOnlyProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return idOnlyTracer{p: p}
}

type idOnlyTracer struct {
	embedded.Tracer
	p *idOnlyProvider
}

// Start returns a non-recording span with a span context of its own.
func (t idOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	if cfg := trace.NewSpanStartConfig(opts...); cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{SpanID: newSpanID(), TraceState: parent.TraceState()}
	if parent.IsValid() {
		cfg.TraceID, cfg.TraceFlags = parent.TraceID(), parent.TraceFlags()
	} else {
		cfg.TraceID = newTraceID()
		res := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: cfg.TraceID, Name: name})
		if res.Decision == sdktrace.RecordAndSample {
			cfg.TraceFlags = trace.FlagsSampled
		}
	}
	span := idOnlySpan{sc: trace.NewSpanContext(cfg), provider: t.p}
	return trace.ContextWithSpan(ctx, span), span
}

// idOnlySpan is a span that carries its span context and records nothing.
type idOnlySpan struct {
	noop.Span
	sc       trace.SpanContext
	provider *idOnlyProvider
}

func (s idOnlySpan) SpanContext() trace.SpanContext       { return s.sc }
func (s idOnlySpan) TracerProvider() trace.TracerProvider { return s.provider }

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for id == (trace.TraceID{}) {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for id == (trace.SpanID{}) {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (56 - 8*i))
		}
	}
	return id
}
