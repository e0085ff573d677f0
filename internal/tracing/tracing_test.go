package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testkit"
	"github.com/eventforge/eventforge/internal/tracing"
	"github.com/eventforge/eventforge/internal/tracing/collector"
)

// recorder installs a global provider that records every span in memory.
func recorder(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     tracing.Config
		wantErr string
	}{
		{"off", tracing.Config{SampleRatio: 1}, ""},
		{"plaintext", tracing.Config{OTLPEndpoint: "http://otel-collector:4317", SampleRatio: 0.5}, ""},
		{"tls", tracing.Config{OTLPEndpoint: "https://otel.example:4317", SampleRatio: 0}, ""},
		{"no scheme", tracing.Config{OTLPEndpoint: "otel-collector:4317", SampleRatio: 1}, "scheme must be http or https"},
		{"no host", tracing.Config{OTLPEndpoint: "http://", SampleRatio: 1}, "no host"},
		{"ratio above one", tracing.Config{SampleRatio: 1.5}, "between 0 and 1"},
		{"negative ratio", tracing.Config{SampleRatio: -0.1}, "between 0 and 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); !testkit.ErrorContains(err, tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q (none if empty)", err, tt.wantErr)
			}
		})
	}
}

func TestLogHandler(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	tests := []struct {
		name        string
		ctx         context.Context
		wantTraceID string
		wantSpanID  string
	}{
		{"span in context", trace.ContextWithSpanContext(context.Background(), sc), sc.TraceID().String(), sc.SpanID().String()},
		{"no span", context.Background(), "", ""},
		{"invalid span context", trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "api")
			logger.InfoContext(tt.ctx, "rpc", "order_id", "o-1")
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			if got, _ := line[tracing.LogKeyTraceID].(string); got != tt.wantTraceID {
				t.Errorf("trace_id = %q, want %q (line %s)", got, tt.wantTraceID, buf.String())
			}
			if got, _ := line[tracing.LogKeySpanID].(string); got != tt.wantSpanID {
				t.Errorf("span_id = %q, want %q", got, tt.wantSpanID)
			}
			if line["component"] != "api" || line["order_id"] != "o-1" {
				t.Errorf("attributes lost: %s", buf.String())
			}
		})
	}
}

func TestLogHandlerWrapsOnce(t *testing.T) {
	h := tracing.LogHandler(slog.NewJSONHandler(&bytes.Buffer{}, nil))
	if tracing.LogHandler(h) != h {
		t.Fatal("wrapping a trace handler again must return it unchanged")
	}
}

func TestHeaderCarrier(t *testing.T) {
	tests := []struct {
		name     string
		headers  []kafka.Header
		set      [2]string
		wantGet  string
		wantKeys []string
	}{
		{
			name:     "replaces every header of the key",
			headers:  []kafka.Header{{Key: contract.HeaderID, Value: []byte("e")}, {Key: "traceparent", Value: []byte("a")}, {Key: "traceparent", Value: []byte("b")}},
			set:      [2]string{"traceparent", "c"},
			wantGet:  "c",
			wantKeys: []string{"id", "traceparent"},
		},
		{
			name:     "adds a missing header",
			headers:  []kafka.Header{{Key: contract.HeaderID, Value: []byte("e")}},
			set:      [2]string{"tracestate", "k=v"},
			wantGet:  "k=v",
			wantKeys: []string{"id", "tracestate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]kafka.Header(nil), tt.headers...)
			hs := tt.headers
			c := tracing.HeaderCarrier{Headers: &hs}
			c.Set(tt.set[0], tt.set[1])
			if got := c.Get(tt.set[0]); got != tt.wantGet {
				t.Errorf("Get(%q) = %q, want %q", tt.set[0], got, tt.wantGet)
			}
			if got := strings.Join(c.Keys(), ","); got != strings.Join(tt.wantKeys, ",") {
				t.Errorf("Keys() = %s, want %s", got, strings.Join(tt.wantKeys, ","))
			}
			for i := range orig {
				if string(tt.headers[i].Value) != string(orig[i].Value) {
					t.Errorf("Set modified the caller's backing array at %d", i)
				}
			}
		})
	}
}

// apiTraceparent is the span context the api stores in outbox.headers.
const (
	apiTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	apiSpanID      = "00f067aa0ba902b7"
	apiTraceparent = "00-" + apiTraceID + "-" + apiSpanID + "-01"
)

func message(topic string, headers ...kafka.Header) *kafka.Message {
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 42},
		Key:            []byte("order-1"),
		Headers:        append([]kafka.Header{{Key: contract.HeaderID, Value: []byte("event-1")}, {Key: contract.HeaderType, Value: []byte(contract.TypeOrderCreated)}}, headers...),
	}
}

func TestPublishThenProcessShareTheAPITrace(t *testing.T) {
	exp := recorder(t)
	msg := message(contract.Topic, kafka.Header{Key: "traceparent", Value: []byte(apiTraceparent)})
	msg.Opaque = "caller opaque"

	tracing.StartPublish(context.Background(), msg)
	if got := tracing.EndPublish(msg.Opaque, nil); got != "caller opaque" {
		t.Fatalf("EndPublish returned opaque %v, want the caller's", got)
	}
	// The consumer receives the record with the headers as produced.
	ctx, span := tracing.StartProcess(context.Background(), "fulfillment", msg)
	if sc := trace.SpanContextFromContext(ctx); sc.TraceID().String() != apiTraceID {
		t.Errorf("process context trace ID %s, want %s", sc.TraceID(), apiTraceID)
	}
	tracing.EndSpan(span, nil)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("got %d spans, want 2 (publish, process)", len(spans))
	}
	pub, proc := spans[0], spans[1]
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != apiTraceID {
			t.Errorf("span %q trace ID %s, want the api's %s", s.Name, s.SpanContext.TraceID(), apiTraceID)
		}
	}
	if pub.Name != "eventforge.orders publish" || pub.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span %q kind %v", pub.Name, pub.SpanKind)
	}
	if pub.Parent.SpanID().String() != apiSpanID || !pub.Parent.IsRemote() {
		t.Errorf("publish parent %s (remote %v), want the api span %s", pub.Parent.SpanID(), pub.Parent.IsRemote(), apiSpanID)
	}
	if proc.Name != "eventforge.orders process" || proc.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span %q kind %v", proc.Name, proc.SpanKind)
	}
	if proc.Parent.SpanID() != pub.SpanContext.SpanID() {
		t.Errorf("process parent %s, want the publish span %s", proc.Parent.SpanID(), pub.SpanContext.SpanID())
	}
	want := map[string]string{
		"messaging.system": "kafka", "messaging.destination.name": contract.Topic,
		"messaging.message.id": "event-1", "eventforge.order_id": "order-1", "eventforge.event_type": contract.TypeOrderCreated,
	}
	for _, s := range spans {
		got := map[string]string{}
		for _, kv := range s.Attributes {
			got[string(kv.Key)] = kv.Value.String()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %q attribute %s = %q, want %q", s.Name, k, got[k], v)
			}
		}
	}
	if got := (tracing.HeaderCarrier{Headers: &msg.Headers}).Get("traceparent"); !strings.Contains(got, pub.SpanContext.SpanID().String()) {
		t.Errorf("record traceparent %q does not name the publish span %s", got, pub.SpanContext.SpanID())
	}
}

func TestSpanErrors(t *testing.T) {
	tests := []struct {
		name       string
		run        func()
		wantStatus codes.Code
	}{
		{"publish delivered", func() {
			m := message("t")
			tracing.StartPublish(context.Background(), m)
			tracing.EndPublish(m.Opaque, nil)
		}, codes.Unset},
		{"publish failed", func() {
			m := message("t")
			tracing.StartPublish(context.Background(), m)
			tracing.EndPublish(m.Opaque, kafka.NewError(kafka.ErrMsgTimedOut, "timed out", false))
		}, codes.Error},
		{"batch failed", func() {
			end := tracing.StartProcessBatch(context.Background(), "ledger", []*kafka.Message{message("t")})
			end(errors.New("serialization failure"))
		}, codes.Error},
		{"batch applied", func() {
			end := tracing.StartProcessBatch(context.Background(), "ledger", []*kafka.Message{message("t")})
			end(nil)
		}, codes.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := recorder(t)
			tt.run()
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			if spans[0].Status.Code != tt.wantStatus {
				t.Errorf("status %v, want %v", spans[0].Status.Code, tt.wantStatus)
			}
			if spans[0].Parent.IsValid() {
				t.Errorf("a record without traceparent must start a new trace, got parent %s", spans[0].Parent.SpanID())
			}
		})
	}
}

func TestEndPublishPassesForeignOpaque(t *testing.T) {
	if got := tracing.EndPublish(7, nil); got != 7 {
		t.Fatalf("EndPublish(7) = %v, want 7", got)
	}
}

// TestSetupExportsOverOTLP runs the real exporter against an in-memory
// OTLP receiver: spans reach it by the time shutdown returns.
func TestSetupExportsOverOTLP(t *testing.T) {
	col, err := collector.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Stop()
	ctx := context.Background()
	shutdown, err := tracing.Setup(ctx, tracing.Config{OTLPEndpoint: col.Endpoint(), SampleRatio: 1}, "cdc", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer().Start(ctx, "work")
	traceID := span.SpanContext().TraceID().String()
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	spans := col.Spans()
	if len(spans) != 1 || spans[0].Name != "work" || spans[0].TraceID != traceID || spans[0].Service != "eventforge-cdc" {
		t.Fatalf("received %+v, want one span \"work\" of eventforge-cdc in trace %s", spans, traceID)
	}
}

func TestSetupWithoutEndpointStillMakesTraceIDs(t *testing.T) {
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{SampleRatio: 1}, "api", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	_, span := tracing.Tracer().Start(context.Background(), "call")
	defer span.End()
	if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() {
		t.Fatalf("span context %v: want a valid, sampled span without an exporter", span.SpanContext())
	}
}

func TestSetupRejectsInvalidConfig(t *testing.T) {
	if _, err := tracing.Setup(context.Background(), tracing.Config{OTLPEndpoint: "collector:4317", SampleRatio: 1}, "api", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("Setup accepted an endpoint without scheme")
	}
}
