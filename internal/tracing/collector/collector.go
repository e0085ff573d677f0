// Package collector is an in-memory OTLP/gRPC trace receiver: processes run
// with --otlp-endpoint pointing at it export their spans into memory, where
// tests read them. It is the test-side end of the exporter that
// internal/tracing configures; it is not meant for production use.
package collector

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, flattened.
type Span struct {
	// Service is the exporting process's service.name resource attribute.
	Service string
	// Name is the span name, e.g. "eventforge.orders publish".
	Name string
	// Kind is the span kind (server, producer, consumer, …).
	Kind tracepb.Span_SpanKind
	// TraceID, SpanID and ParentSpanID are lowercase hex, as in traceparent;
	// ParentSpanID is "" for a root span.
	TraceID, SpanID, ParentSpanID string
	// Attributes holds the span's string, int and bool attributes as text.
	Attributes map[string]string
}

// Collector receives spans over OTLP/gRPC and keeps them in memory.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	srv  *grpc.Server
	addr string

	mu    sync.Mutex
	spans []Span
}

// Start listens on a free loopback port and serves until Stop.
func Start() (*Collector, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for otlp: %w", err)
	}
	c := &Collector{srv: grpc.NewServer(), addr: lis.Addr().String()}
	coltracepb.RegisterTraceServiceServer(c.srv, c)
	go func() { _ = c.srv.Serve(lis) }()
	return c, nil
}

// Endpoint is the URL to pass as --otlp-endpoint (plaintext gRPC).
func (c *Collector) Endpoint() string { return "http://" + c.addr }

// Stop stops serving.
func (c *Collector) Stop() { c.srv.Stop() }

// Export implements the OTLP trace service.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attributes: map[string]string{},
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentSpanID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = valueText(kv.GetValue())
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans returns a copy of every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// valueText renders an attribute value as text; arrays and maps as "".
func valueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return ""
}
