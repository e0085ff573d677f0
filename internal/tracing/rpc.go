package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
)

// GRPCServerOption traces every gRPC call the server receives: one server
// span per call, continuing the caller's traceparent from the metadata.
// The span is in the handler's context, so what the handler stores or logs
// with that context carries its trace and span IDs.
func GRPCServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler())
}

// GRPCDialOption traces outgoing gRPC calls and injects the caller's trace
// context into their metadata (the REST gateway's calls to the gRPC server).
func GRPCDialOption() grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler())
}

// HTTPHandler traces every request h serves: one server span named
// operation, continuing the traceparent header when the request has one.
func HTTPHandler(h http.Handler, operation string) http.Handler {
	return otelhttp.NewHandler(h, operation)
}
