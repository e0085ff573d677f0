package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys added to every line logged with a context that holds a span.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// LogHandler wraps h so that a record logged with a context holding a valid
// span context (logger.InfoContext(ctx, …), logger.LogAttrs(ctx, …)) gets
// trace_id and span_id attributes, the hex IDs a trace backend searches by.
// Records logged without such a context are passed through unchanged.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(traceHandler); ok {
		return h
	}
	return traceHandler{h}
}

type traceHandler struct{ slog.Handler }

// Handle adds the trace and span IDs of ctx, if any, then delegates.
func (t traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return t.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the derived handler.
func (t traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{t.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the derived handler.
func (t traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{t.Handler.WithGroup(name)}
}
