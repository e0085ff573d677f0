package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
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
	mux.Handle("/v1/", tracing.HTTPHandler(routes.allowMethods(routes.requireUTF8(routes.checkQuery(limitBody(gw, MaxRequestBytes, logger)))), "rest"))
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
		Handler:           limitHeaders(mux),
		MaxHeaderBytes:    serverHeaderBytes,
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}, nil
}

// Bounds of a request's head. A URL longer than MaxURLBytes is answered 414
// and a request line and headers of more than MaxHeaderBytes 431, each with
// a google.rpc.Status body. Only a head beyond serverHeaderBytes, which the
// HTTP server refuses before any handler sees it, gets its plain-text 431.
const (
	MaxURLBytes       = 8 << 10
	MaxHeaderBytes    = 64 << 10
	serverHeaderBytes = 4 << 20
)

// limitHeaders answers a request whose URL or head is larger than
// MaxURLBytes or MaxHeaderBytes with 414 or 431 and a google.rpc.Status.
func limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := len(r.RequestURI); n > MaxURLBytes {
			writeStatus(w, http.StatusRequestURITooLong, status.New(codes.InvalidArgument,
				fmt.Sprintf("the URL is %d bytes long; at most %d are read", n, MaxURLBytes)))
			return
		}
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto)
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4 // ": " and CRLF
			}
		}
		if n > MaxHeaderBytes {
			writeStatus(w, http.StatusRequestHeaderFieldsTooLarge, status.New(codes.InvalidArgument,
				fmt.Sprintf("the request line and headers are %d bytes long; at most %d are read", n, MaxHeaderBytes)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody refuses request bodies larger than limit with 413 and a
// google.rpc.Status body, a body not received within the server's read
// timeout with 408, and a body that is not JSON (Content-Type
// application/json, in UTF-8 if a charset is named) with 415; the gateway
// then decodes the buffered body (rpc.RequestBody). It also refuses with
// 400 an Idempotency-Key the gateway could not forward.
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
			if len(body) > 0 && !isJSON(r.Header.Get("Content-Type")) {
				w.Header().Set("Accept", "application/json")
				writeStatus(w, http.StatusUnsupportedMediaType, status.New(codes.InvalidArgument,
					"the request body must be JSON: Content-Type application/json (UTF-8)"))
				return
			}
			r.Body = rpc.NewRequestBody(body)
		}
		next.ServeHTTP(w, r)
	})
}

// isJSON reports whether a Content-Type names JSON in UTF-8:
// application/json, with no charset or charset utf-8.
func isJSON(contentType string) bool {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "application/json" {
		return false
	}
	charset, ok := params["charset"]
	return !ok || strings.EqualFold(charset, "utf-8")
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
