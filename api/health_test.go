package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestHealthReflectionOpenAPI: grpc.health.v1 answers SERVING, reflection
// lists the service, and the served OpenAPI document passes an independent
// validator and documents every route with its error responses.
func TestHealthReflectionOpenAPI(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	health := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", ServiceName} {
		resp, err := health.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v, %v", svc, resp, err)
		}
	}
	if services := reflectedServices(t, s.conn); !strings.Contains(strings.Join(services, " "), ServiceName) {
		t.Fatalf("reflection lists %v, want %s", services, ServiceName)
	}

	resp, err := http.Get("http://" + s.addrs.HTTP + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	file := t.TempDir() + "/openapi.json"
	if err := os.WriteFile(file, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := validateOpenAPI(t, file); err != nil {
		t.Fatalf("served /openapi.json does not validate: %v\n%s", err, out)
	}

	var spec struct {
		Paths map[string]map[string]struct {
			Responses  map[string]any `json:"responses"`
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		t.Fatal(err)
	}
	routes := []struct {
		method, path string
		errors       []string
	}{
		{"post", "/v1/orders", []string{"400", "409", "413", "414", "415", "431", "500", "503", "504"}},
		{"get", "/v1/orders", []string{"400", "414", "431", "500", "503", "504"}},
		{"get", "/v1/orders/{order_id}", []string{"400", "404", "414", "431", "500", "503", "504"}},
		{"post", "/v1/orders/{order_id}:cancel", []string{"400", "404", "413", "414", "415", "431", "500", "503", "504"}},
	}
	ops := 0
	for _, p := range spec.Paths {
		ops += len(p)
	}
	if ops != len(routes) {
		t.Fatalf("document has %d operations, want %d", ops, len(routes))
	}
	for _, r := range routes {
		op, ok := spec.Paths[r.path][r.method]
		if !ok {
			t.Fatalf("%s %s not documented", r.method, r.path)
		}
		for _, code := range append([]string{"200"}, r.errors...) {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s %s: response %s not documented", r.method, r.path, code)
			}
		}
	}
	var hasKeyHeader bool
	for _, p := range spec.Paths["/v1/orders"]["post"].Parameters {
		hasKeyHeader = hasKeyHeader || (p.Name == "Idempotency-Key" && p.In == "header")
	}
	if !hasKeyHeader {
		t.Error("POST /v1/orders does not document the Idempotency-Key header")
	}

	t.Run("the validator rejects a broken document", func(t *testing.T) {
		broken := bytes.Replace(doc, []byte(`"swagger": "2.0"`), []byte(`"swagger": "2.0", "paths_typo": {}`), 1)
		if bytes.Equal(broken, doc) {
			t.Fatal("could not break the document")
		}
		bad := t.TempDir() + "/broken.json"
		if err := os.WriteFile(bad, broken, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := validateOpenAPI(t, bad); err == nil {
			t.Fatalf("validator accepted a document with an unknown top-level field: %s", out)
		}
	})
}

// TestDatabaseDown: with the database refusing connections, create answers
// UNAVAILABLE / 503; a transaction cut off before its COMMIT leaves no row.
func TestDatabaseDown(t *testing.T) {
	env := testenv.New(t)
	s := startServer(t, env, nil)
	admin, err := pgx.Connect(ctxTimeout(t), env.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	db := pgx.Identifier{env.Database}.Sanitize()
	terminate := func() {
		if _, err := admin.Exec(ctxTimeout(t), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, env.Database); err != nil {
			t.Fatal(err)
		}
	}
	setAllow := func(allow bool) {
		if _, err := admin.Exec(ctxTimeout(t), fmt.Sprintf(`ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t`, db, allow)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("connections refused", func(t *testing.T) {
		setAllow(false)
		terminate()
		_, err := s.client.CreateOrder(ctxTimeout(t), validCreate())
		grpcCode := status.Code(err)
		r := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, validCreate()), nil)
		list := s.do(t, http.MethodGet, "/v1/orders", nil, nil)
		ready, rerr := http.Get("http://" + s.addrs.HTTP + "/readyz")
		if rerr == nil {
			ready.Body.Close()
		}
		setAllow(true)
		if grpcCode != codes.Unavailable {
			t.Errorf("gRPC code %v, want Unavailable (%v)", grpcCode, err)
		}
		if r.Status != http.StatusServiceUnavailable || list.Status != http.StatusServiceUnavailable {
			t.Errorf("REST create %d, list %d; want 503: %s", r.Status, list.Status, r.Raw)
		}
		if errorReason(r.Body) != rpc.ReasonNotWritten {
			t.Errorf("REST create answered reason %q, want %s: %s", errorReason(r.Body), rpc.ReasonNotWritten, r.Raw)
		}
		if strings.Contains(r.Raw, "accepting connections") || strings.Contains(r.Raw, "SQLSTATE") {
			t.Errorf("database error text reached the client: %s", r.Raw)
		}
		if rerr != nil || ready.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("readyz: %v %v, want 503", ready, rerr)
		}
		if c := counts(t, env); c != (rowCounts{}) {
			t.Fatalf("rows written: %+v", c)
		}
	})

	t.Run("connection lost before COMMIT", func(t *testing.T) {
		// The create's transaction has written every row and waits at the
		// failpoint; its connection is terminated; COMMIT never happens.
		fired := make(chan struct{}, 1)
		armFailpoint(t, failpoint.APIBeforeCommit+"=1*delay(1s)", func() { fired <- struct{}{} })
		terminated := make(chan error, 1)
		go func() {
			<-fired
			_, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, env.Database)
			terminated <- err
		}()
		r := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, validCreate()), http.Header{"Idempotency-Key": {"cut-off"}})
		if err := <-terminated; err != nil {
			t.Fatal(err)
		}
		// The COMMIT was sent on a dead connection: the api found the
		// transaction rolled back and says so.
		if r.Status != http.StatusServiceUnavailable || errorReason(r.Body) != rpc.ReasonNotWritten {
			t.Fatalf("status %d, reason %q; want 503 with %s: %s", r.Status, errorReason(r.Body), rpc.ReasonNotWritten, r.Raw)
		}
		if c := counts(t, env); c != (rowCounts{}) {
			t.Fatalf("partial write: %+v", c)
		}
		// The retry under the same key succeeds: nothing of the first attempt
		// was kept.
		r = s.do(t, http.MethodPost, "/v1/orders", restJSON(t, validCreate()), http.Header{"Idempotency-Key": {"cut-off"}})
		if r.Status != http.StatusOK {
			t.Fatalf("retry: status %d: %s", r.Status, r.Raw)
		}
		if c := counts(t, env); c != (rowCounts{Orders: 1, Items: 1, Outbox: 1, Keys: 1}) {
			t.Fatalf("after retry: %+v", c)
		}
	})

	t.Run("deadline reaches the transaction", func(t *testing.T) {
		before := counts(t, env)
		armFailpoint(t, failpoint.APIBeforeCommit+"=1*delay(5s)", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := s.client.CreateOrder(ctx, validCreate())
		if code := status.Code(err); code != codes.DeadlineExceeded {
			t.Fatalf("code %v, want DeadlineExceeded", code)
		}
		// The server gave up within the caller's deadline (not after the 5 s
		// delay): its transaction is rolled back and its connection free.
		testenv.Eventually(t, 3*time.Second, "no transaction left open", func() error {
			var open int
			err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in transaction%'`, env.Database).Scan(&open)
			if err == nil && open > 0 {
				err = fmt.Errorf("%d transactions still open", open)
			}
			return err
		})
		if after := counts(t, env); after != before {
			t.Fatalf("rows changed from %+v to %+v", before, after)
		}
	})
}
