package api

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/internal/tlsconf"
	"github.com/eventforge/eventforge/internal/tracing"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// newGateway builds the REST gateway: it translates REST requests into calls
// of the gRPC server at grpcAddr over a client connection, which the caller
// closes.
func newGateway(ctx context.Context, grpcAddr string, selfTLS *tls.Config) (*runtime.ServeMux, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(tlsconf.ClientCredentials(selfTLS)), tracing.GRPCDialOption())
	if err != nil {
		return nil, nil, fmt.Errorf("dialing own grpc server: %w", err)
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, rpc.RESTMarshaler()),
		runtime.SetQueryParameterParser(rpc.QueryParser()),
		runtime.WithIncomingHeaderMatcher(forwardHeader),
		runtime.WithOutgoingHeaderMatcher(answerHeader),
		runtime.WithErrorHandler(answerError),
	)
	if err := eventforgev1.RegisterOrderServiceHandler(ctx, gw, conn); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("registering gateway: %w", err)
	}
	return gw, conn, nil
}

// forwardHeader passes the idempotency key and the W3C trace context from
// REST requests to the gRPC call's metadata, besides the gateway's default
// set.
func forwardHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case rpc.IdempotencyKeyMetadata, "traceparent", "tracestate":
		return k, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// answerHeader passes the gRPC server's response metadata on as
// Grpc-Metadata-* headers, as the gateway does by default, except gRPC's
// own content-type, which says nothing about the REST answer.
func answerHeader(key string) (string, bool) {
	if strings.EqualFold(key, "content-type") {
		return "", false
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// answerError writes an error as the gateway does, except that a request
// body the decoder refused is answered with the refusal it recorded
// (rpc.BodyFault): the gateway itself keeps only its text, without the
// field violation.
func answerError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st := rpc.BodyFault(r.Body); st != nil {
		err = st.Err()
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
