package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/tracing/collector"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// traceparentParts splits a W3C traceparent into trace and span IDs.
func traceparentParts(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("traceparent %q is not W3C", tp)
	}
	return parts[1], parts[2]
}

// TestOneTraceAcrossAPICDCConsumer follows one order through three real
// processes exporting to an in-memory OTLP receiver: the api's call span,
// cdc's publish span and the consumer's process span share one trace ID and
// form a chain (api → publish → process) through outbox.headers and the
// Kafka record headers; the api's log line of the call carries the trace ID.
// A caller's own traceparent is continued, not replaced.
func TestOneTraceAcrossAPICDCConsumer(t *testing.T) {
	col, err := collector.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Stop()
	pl := newPipeline(t)
	// Export every 200 ms instead of every 5 s.
	env := []string{"EVENTFORGE_OTLP_ENDPOINT=" + col.Endpoint(), "OTEL_BSP_SCHEDULE_DELAY=200"}
	pl.startAPI(t, env...)
	pl.startCDC(t, "cdc", env)
	pl.startConsumer(t, "consumer", env)

	// A REST call without trace context starts a trace at the api; a gRPC
	// call with a caller's traceparent continues the caller's trace.
	restOrder, restEvent := createREST(t, pl.httpAddr, "trace-rest")
	const callerTraceID = "0af7651916cd43dd8448eb211c80319c"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+callerTraceID+"-b7ad6b7169203331-01")
	resp, err := grpcClient(t, pl.grpcAddr).CreateOrder(ctx, &eventforgev1.CreateOrderRequest{
		CustomerId: "trace-grpc", Currency: "EUR",
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}},
	})
	if err != nil {
		t.Fatalf("create over gRPC: %v", err)
	}
	grpcOrder, grpcEvent := resp.GetOrder().GetOrderId(), resp.GetEventId()
	waitProcessed(t, pl, restOrder, restEvent)
	waitProcessed(t, pl, grpcOrder, grpcEvent)

	records := recordsByEventID(t, pl)
	for _, tc := range []struct {
		name, orderID, eventID, wantTraceID string
	}{
		{"rest", restOrder, restEvent, ""},
		{"grpc with caller traceparent", grpcOrder, grpcEvent, callerTraceID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stored string
			if err := pl.env.Pool.QueryRow(context.Background(),
				`SELECT coalesce(headers->>'traceparent', '') FROM outbox WHERE id = $1`, tc.eventID).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			traceID, apiSpanID := traceparentParts(t, stored)
			if tc.wantTraceID != "" && traceID != tc.wantTraceID {
				t.Fatalf("outbox traceparent %s: trace %s, want the caller's %s", stored, traceID, tc.wantTraceID)
			}
			recs := records[tc.eventID]
			if len(recs) == 0 {
				t.Fatalf("event %s is not in Kafka", tc.eventID)
			}
			recTraceID, publishSpanID := traceparentParts(t, recs[0].Headers["traceparent"])
			if recTraceID != traceID || publishSpanID == apiSpanID {
				t.Fatalf("Kafka traceparent %s: want trace %s with cdc's span, not the api's %s", recs[0].Headers["traceparent"], traceID, apiSpanID)
			}

			var api, publish, process *collector.Span
			testenv.Eventually(t, 30*time.Second, "spans of event "+tc.eventID, func() error {
				api, publish, process = nil, nil, nil
				for _, s := range col.Spans() {
					switch {
					case s.Service == "eventforge-api" && s.SpanID == apiSpanID:
						api = &s
					case s.Service == "eventforge-cdc" && s.Kind == tracepb.Span_SPAN_KIND_PRODUCER && s.Attributes["messaging.message.id"] == tc.eventID:
						publish = &s
					case s.Service == "eventforge-consumer" && s.Kind == tracepb.Span_SPAN_KIND_CONSUMER && s.Attributes["messaging.message.id"] == tc.eventID:
						process = &s
					}
				}
				if api == nil || publish == nil || process == nil {
					return fmt.Errorf("api %v, publish %v, process %v", api != nil, publish != nil, process != nil)
				}
				return nil
			})
			for _, s := range []*collector.Span{api, publish, process} {
				if s.TraceID != traceID {
					t.Errorf("%s span %q: trace %s, want %s", s.Service, s.Name, s.TraceID, traceID)
				}
			}
			if api.Name != "eventforge.v1.OrderService/CreateOrder" || api.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("api span %q kind %v, want the CreateOrder server span", api.Name, api.Kind)
			}
			if publish.ParentSpanID != apiSpanID || publish.SpanID != publishSpanID {
				t.Errorf("publish span %s parent %s; want parent %s (api) and the id in the Kafka header %s",
					publish.SpanID, publish.ParentSpanID, apiSpanID, publishSpanID)
			}
			if process.ParentSpanID != publish.SpanID {
				t.Errorf("process span parent %s, want the publish span %s", process.ParentSpanID, publish.SpanID)
			}
			if publish.Attributes["eventforge.order_id"] != tc.orderID || process.Attributes["eventforge.order_id"] != tc.orderID {
				t.Errorf("order ID attribute: publish %q, process %q, want %s",
					publish.Attributes["eventforge.order_id"], process.Attributes["eventforge.order_id"], tc.orderID)
			}
			if tc.wantTraceID == "" {
				// The REST call: its HTTP span is the root, the gRPC server span below it.
				if api.ParentSpanID == "" {
					t.Errorf("REST call: the api's gRPC span has no parent; want the gateway's spans above it")
				}
			}
			if !logHasTrace(t, "artifacts/"+strings.ReplaceAll(t.Name()[:strings.Index(t.Name(), "/")], "/", "_")+"/api.log", tc.orderID, traceID) {
				t.Errorf("no api log line for order %s carries trace_id %s", tc.orderID, traceID)
			}
		})
	}
}

// logHasTrace reports whether a JSON log line names orderID and traceID.
func logHasTrace(t *testing.T, path, orderID, traceID string) bool {
	t.Helper()
	for _, l := range readLog(t, path) {
		if l.Fields["order_id"] == orderID && l.Fields["trace_id"] == traceID {
			return true
		}
	}
	return false
}
