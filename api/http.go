package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/internal/metrics"
	"github.com/eventforge/eventforge/internal/tracing"
)

// newHTTPServer builds the HTTP server: the gateway under /v1/ (only the
// declared routes and methods, UTF-8, bodies up to MaxRequestBytes), the
// health endpoints, the metrics, the OpenAPI document and cfg.Handlers.
func newHTTPServer(cfg Config, st *store.Store, gw http.Handler, logger *slog.Logger) (*http.Server, error) {
	openAPI, err := rpc.OpenAPI()
	if err != nil {
		return nil, fmt.Errorf("building the OpenAPI document: %w", err)
	}
	routes, err := declaredRoutes(openAPI)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", tracing.HTTPHandler(routes.allowMethods(routes.requireUTF8(limitBody(gw, MaxRequestBytes, logger))), "rest"))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := st.Ping(pctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable","reason":"database unreachable"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", metrics.Handler())
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	for pattern, h := range cfg.Handlers {
		mux.Handle(pattern, h)
	}
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}, nil
}

// limitBody refuses request bodies larger than limit with 413 and a
// google.rpc.Status body, and a body not received within the server's read
// timeout with 408; the gateway then decodes the buffered body. It also
// refuses with 400 an Idempotency-Key the gateway could not forward.
func limitBody(next http.Handler, limit int64, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			tooLarge(w, r, limit, logger)
			return
		}
		for _, key := range r.Header.Values(rpc.IdempotencyKeyHeader) {
			if strings.ContainsFunc(key, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
				// gRPC metadata cannot carry it: the gateway would drop it.
				if err := rpc.KeyHeaderError(key); err != nil {
					writeStatus(w, http.StatusBadRequest, status.Convert(err))
					return
				}
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			var netErr net.Error
			switch {
			case errors.As(err, &netErr) && netErr.Timeout():
				logger.LogAttrs(r.Context(), slog.LevelInfo, "http request refused",
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", http.StatusRequestTimeout))
				writeStatus(w, http.StatusRequestTimeout, status.New(codes.DeadlineExceeded, "the request body was not received in time"))
				return
			case err != nil:
				writeStatus(w, http.StatusBadRequest, status.New(codes.InvalidArgument, "reading the request body failed"))
				return
			}
			if int64(len(body)) > limit {
				tooLarge(w, r, limit, logger)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter, r *http.Request, limit int64, logger *slog.Logger) {
	logger.LogAttrs(r.Context(), slog.LevelInfo, "http request refused",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", http.StatusRequestEntityTooLarge), slog.Int64("content_length", r.ContentLength))
	writeStatus(w, http.StatusRequestEntityTooLarge,
		status.New(codes.ResourceExhausted, fmt.Sprintf("the request body is larger than %d bytes", limit)))
}

// writeStatus writes st as the gateway writes errors: a google.rpc.Status in
// JSON with proto field names.
func writeStatus(w http.ResponseWriter, httpStatus int, st *status.Status) {
	body, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"internal error","details":[]}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}
