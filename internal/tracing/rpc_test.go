package tracing_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/eventforge/eventforge/internal/tracing"
)

// TestIDOnlyInstrumentationContinuesTheCallersTrace: without an exporter
// the gRPC server, the gRPC client and the HTTP handler use EventForge's
// id-only instrumentation, and the handler's context still carries a span
// of its own in the caller's trace: from a traceparent in the gRPC
// metadata, from the HTTP header through the gateway's gRPC call, and a
// new trace without either.
func TestIDOnlyInstrumentationContinuesTheCallersTrace(t *testing.T) {
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{SampleRatio: 1}, "api", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()

	seen := make(chan trace.SpanContext, 1)
	parents := make(chan []string, 1) // the traceparent metadata of each call
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(tracing.GRPCServerOption(), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen <- trace.SpanContextFromContext(ctx)
			parents <- metadata.ValueFromIncomingContext(ctx, "traceparent")
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	dial := func(opts ...grpc.DialOption) healthpb.HealthClient {
		t.Helper()
		conn, err := grpc.NewClient("passthrough:///bufnet", append(opts,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	// A caller's own metadata, sent by a client without instrumentation,
	// and the REST gateway's client, which sends its span's.
	plain, client := dial(), dial(tracing.GRPCDialOption())
	call := func(ctx context.Context) trace.SpanContext {
		t.Helper()
		if _, err := plain.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		<-parents
		return <-seen
	}

	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	for _, flags := range []string{"01", "00"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-"+flags)
		sc := call(ctx)
		if sc.TraceID().String() != callerTrace || sc.SpanID().String() == callerSpan || sc.IsSampled() != (flags == "01") || sc.IsRemote() {
			t.Fatalf("gRPC call with traceparent flags %s: handler's span %s/%s sampled %v remote %v; want trace %s, a new local span, sampled %v",
				flags, sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote(), callerTrace, flags == "01")
		}
	}
	if sc := call(context.Background()); !sc.IsValid() || sc.TraceID().String() == callerTrace || !sc.IsSampled() {
		t.Fatalf("gRPC call without trace context: handler's span %s/%s sampled %v; want a new sampled trace", sc.TraceID(), sc.SpanID(), sc.IsSampled())
	}

	// REST: the HTTP handler continues the header's trace, and its gRPC call
	// carries that trace on to the server, in place of a traceparent the
	// outgoing metadata had already.
	var httpSpan trace.SpanContext
	h := tracing.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpSpan = trace.SpanContextFromContext(r.Context())
		ctx := metadata.AppendToOutgoingContext(r.Context(), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}), "rest")
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("REST call: status %d: %s", rec.Code, rec.Body)
	}
	sc, sent := <-seen, <-parents
	if len(sent) != 1 || sent[0][36:52] == callerSpan || sent[0][36:52] == httpSpan.SpanID().String() || sent[0][3:35] != callerTrace {
		t.Fatalf("the gateway's call sent traceparent %q; want one, of a client span in trace %s", sent, callerTrace)
	}
	if httpSpan.TraceID().String() != callerTrace || httpSpan.SpanID().String() == callerSpan {
		t.Fatalf("HTTP handler's span %s/%s; want trace %s and a new span", httpSpan.TraceID(), httpSpan.SpanID(), callerTrace)
	}
	if sc.TraceID().String() != callerTrace || sc.SpanID() == httpSpan.SpanID() || sc.SpanID().String() == callerSpan || !sc.IsSampled() {
		t.Fatalf("gRPC handler behind the HTTP handler: span %s/%s; want trace %s and a span of its own", sc.TraceID(), sc.SpanID(), callerTrace)
	}
}
