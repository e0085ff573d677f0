package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestIDOnlyProvider: without an exporter, spans record nothing but carry
// span contexts of their own, so IDs still propagate: a child keeps its
// parent's trace ID and sampling decision under a new span ID; a new trace
// gets a new trace ID, sampled by the ratio.
func TestIDOnlyProvider(t *testing.T) {
	tracer := newIDOnlyProvider(1).Tracer("test")
	ctx, root := tracer.Start(context.Background(), "root")
	rsc := root.SpanContext()
	if !rsc.IsValid() || !rsc.IsSampled() || root.IsRecording() {
		t.Fatalf("root span: valid %v sampled %v recording %v; want a valid, sampled, non-recording span", rsc.IsValid(), rsc.IsSampled(), root.IsRecording())
	}
	_, child := tracer.Start(ctx, "child")
	csc := child.SpanContext()
	if csc.TraceID() != rsc.TraceID() || csc.SpanID() == rsc.SpanID() || !csc.IsSampled() {
		t.Fatalf("child %s/%s of %s/%s: want the same trace ID, a new span ID, sampled", csc.TraceID(), csc.SpanID(), rsc.TraceID(), rsc.SpanID())
	}
	_, other := tracer.Start(ctx, "new root", trace.WithNewRoot())
	if other.SpanContext().TraceID() == rsc.TraceID() {
		t.Fatal("WithNewRoot kept the parent's trace ID")
	}

	// A remote parent that was not sampled stays unsampled; with ratio 0 a
	// new trace is not sampled, yet its IDs are valid.
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: rsc.TraceID(), SpanID: rsc.SpanID(), Remote: true})
	_, s := tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), unsampled), "child of unsampled")
	if s.SpanContext().IsSampled() || s.SpanContext().TraceID() != rsc.TraceID() {
		t.Fatalf("child of an unsampled parent: %+v", s.SpanContext())
	}
	_, none := newIDOnlyProvider(0).Tracer("test").Start(context.Background(), "root")
	if !none.SpanContext().IsValid() || none.SpanContext().IsSampled() {
		t.Fatalf("ratio 0: valid %v sampled %v; want valid and not sampled", none.SpanContext().IsValid(), none.SpanContext().IsSampled())
	}
	seen := map[trace.SpanID]bool{}
	for range 1000 {
		_, s := tracer.Start(ctx, "s")
		if seen[s.SpanContext().SpanID()] {
			t.Fatal("span ID repeated within 1000 spans")
		}
		seen[s.SpanContext().SpanID()] = true
	}
}
