package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/api/rpc"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// openAPIValidator is the independent validator: @apidevtools/swagger-parser
// under testdata/openapi, installed by `make test` (npm ci).
const openAPIValidator = "testdata/openapi"

// validateOpenAPI runs the validator on file. It fails the test (never skips
// it) when node or the validator's packages are missing.
func validateOpenAPI(t *testing.T, file string) ([]byte, error) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to validate the OpenAPI document: %v", err)
	}
	if _, err := os.Stat(filepath.Join(openAPIValidator, "node_modules", "@apidevtools", "swagger-parser")); err != nil {
		t.Fatalf("the OpenAPI validator is not installed (run `make openapi-validator`, i.e. npm ci --prefix api/%s): %v", openAPIValidator, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join(openAPIValidator, "validate.mjs"), file).CombinedOutput()
	t.Logf("openapi validator: %s", out)
	return out, err
}

// reflectedServices lists the services the server reflection API reports.
func reflectedServices(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		t.Logf("closing reflection stream: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// armFailpoint arms spec in this process for the rest of the test; onFire,
// if not nil, runs when a point fires.
func armFailpoint(t *testing.T, spec string, onFire func()) {
	t.Helper()
	// OnFire is set before Arm: Arm's lock orders the write before any Eval.
	failpoint.OnFire = func(string, failpoint.Action) {
		if onFire != nil {
			onFire()
		}
	}
	if err := failpoint.Arm(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := failpoint.Arm(""); err != nil {
			t.Error(err)
		}
	})
}

// server is one in-process order service on a test database of its own.
type server struct {
	env    *testenv.Env
	addrs  Addrs
	client eventforgev1.OrderServiceClient
	conn   *grpc.ClientConn
	logs   *syncBuffer
}

// syncBuffer collects the service's JSON log lines.
type syncBuffer struct{ testkit.Buffer }

// lines returns the JSON log lines with message msg.
func (b *syncBuffer) lines(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// startServer runs the api on env's database on free loopback ports until
// the test ends.
func startServer(t *testing.T, env *testenv.Env, mutate func(*Config)) *server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.GRPCAddr, cfg.HTTPAddr = env.DatabaseURL, "127.0.0.1:0", "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(logs, testWriter{t}), nil))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, logger, NotifyReady(ready)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("api: %v", err)
		}
	})
	var addrs Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("api stopped at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("api did not start")
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &server{env: env, addrs: addrs, client: eventforgev1.NewOrderServiceClient(conn), conn: conn, logs: logs}
}

// testWriter sends the service's log to the test log only with -v.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	}
	return len(p), nil
}

// rowCounts counts the rows a create or cancel writes, on a connection of its
// own (the pool's may have been terminated by a test).
type rowCounts struct{ Orders, Items, Outbox, Keys int }

func counts(t *testing.T, env *testenv.Env) rowCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatalf("connecting to count rows: %v", err)
	}
	defer conn.Close(ctx)
	var c rowCounts
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_items),
		(SELECT count(*) FROM outbox), (SELECT count(*) FROM idempotency_keys)`).Scan(&c.Orders, &c.Items, &c.Outbox, &c.Keys)
	if err != nil {
		t.Fatalf("counting rows: %v", err)
	}
	return c
}

// httpResult is a REST answer.
type httpResult struct {
	Status int
	Body   map[string]any
	Raw    string
}

func (s *server) do(t *testing.T, method, path string, body []byte, header http.Header) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addrs.HTTP+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := httpResult{Status: resp.StatusCode, Raw: string(raw)}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("%s %s: %d answer is not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return r
}

// restFields lists the fields named by the BadRequest detail of a REST error.
func restFields(body map[string]any) []string {
	var fields []string
	details, _ := body["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		vs, _ := dm["field_violations"].([]any)
		for _, v := range vs {
			if vm, ok := v.(map[string]any); ok {
				f, _ := vm["field"].(string)
				fields = append(fields, f)
			}
		}
	}
	return fields
}

// errorReason returns the reason of the eventforge.v1 google.rpc.ErrorInfo
// detail of a REST error ("" without one).
func errorReason(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		if dm["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" && dm["domain"] == rpc.ErrorDomain {
			r, _ := dm["reason"].(string)
			return r
		}
	}
	return ""
}

// grpcFields lists the fields named by the BadRequest detail of a status.
func grpcFields(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

func validCreate() *eventforgev1.CreateOrderRequest {
	return &eventforgev1.CreateOrderRequest{
		CustomerId: "c-1", Currency: "EUR",
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999}},
	}
}

// restJSON encodes a request as a REST body (proto field names).
func restJSON(t *testing.T, req *eventforgev1.CreateOrderRequest) []byte {
	t.Helper()
	m := map[string]any{"customer_id": req.GetCustomerId(), "currency": req.GetCurrency()}
	items := []map[string]any{}
	for _, it := range req.GetItems() {
		items = append(items, map[string]any{"sku": it.GetSku(), "quantity": it.GetQuantity(), "unit_price_cents": fmt.Sprint(it.GetUnitPriceCents())})
	}
	m["items"] = items
	if req.GetRequestId() != "" {
		m["request_id"] = req.GetRequestId()
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}
