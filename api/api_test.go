package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// server is one in-process order service on a test database of its own.
type server struct {
	env    *testenv.Env
	addrs  Addrs
	client eventforgev1.OrderServiceClient
	conn   *grpc.ClientConn
	logs   *syncBuffer
}

// syncBuffer collects the service's JSON log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the decoded log records whose msg is msg.
func (b *syncBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(b.buf.String(), "\n") {
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
	go func() { done <- RunNotify(ctx, cfg, logger, ready) }()
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

// TestValidationWritesNothing: every validation rule, through gRPC and
// through REST, answers INVALID_ARGUMENT / 400 naming the field, and
// PostgreSQL gains no row.
func TestValidationWritesNothing(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	items := func(n int) []*eventforgev1.OrderItem {
		out := make([]*eventforgev1.OrderItem, n)
		for i := range out {
			out[i] = &eventforgev1.OrderItem{Sku: fmt.Sprintf("S-%d", i), Quantity: 1, UnitPriceCents: 1}
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(*eventforgev1.CreateOrderRequest)
		field  string
	}{
		{"customer_id empty", func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "" }, "customer_id"},
		{"customer_id 129 chars", func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = strings.Repeat("c", 129) }, "customer_id"},
		{"no items", func(r *eventforgev1.CreateOrderRequest) { r.Items = nil }, "items"},
		{"101 items", func(r *eventforgev1.CreateOrderRequest) { r.Items = items(101) }, "items"},
		{"sku pattern", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "no spaces allowed" }, "items[0].sku"},
		{"sku empty", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "" }, "items[0].sku"},
		{"quantity 0", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Quantity = 0 }, "items[0].quantity"},
		{"quantity 10001", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Quantity = 10_001 }, "items[0].quantity"},
		{"unit price negative", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].UnitPriceCents = -1 }, "items[0].unit_price_cents"},
		{"currency lower case", func(r *eventforgev1.CreateOrderRequest) { r.Currency = "eur" }, "currency"},
		{"currency 4 letters", func(r *eventforgev1.CreateOrderRequest) { r.Currency = "EURO" }, "currency"},
		{"currency empty", func(r *eventforgev1.CreateOrderRequest) { r.Currency = "" }, "currency"},
		{"unit price near 2^63", func(r *eventforgev1.CreateOrderRequest) {
			r.Items = []*eventforgev1.OrderItem{{Sku: "A", Quantity: 10_000, UnitPriceCents: 1 << 62}}
		}, "items[0].unit_price_cents"},
		{"unit price over 10^12", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].UnitPriceCents = 1_000_000_000_001 }, "items[0].unit_price_cents"},
		{"currency XYZ", func(r *eventforgev1.CreateOrderRequest) { r.Currency = "XYZ" }, "currency"},
		{"customer_id with NUL", func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "a\x00b" }, "customer_id"},
		{"customer_id with C1 control", func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "a\u009bb" }, "customer_id"},
		{"sku with NUL", func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "A\x00" }, "items[0].sku"},
		{"request_id with NUL", func(r *eventforgev1.CreateOrderRequest) { r.RequestId = "k\x00" }, "request_id"},
		{"request_id too long", func(r *eventforgev1.CreateOrderRequest) { r.RequestId = strings.Repeat("k", 256) }, "request_id"},
	}
	for _, tt := range tests {
		req := validCreate()
		tt.mutate(req)
		t.Run("gRPC/"+tt.name, func(t *testing.T) {
			_, err := s.client.CreateOrder(ctxTimeout(t), req)
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("code %v, want InvalidArgument (%v)", code, err)
			}
			if fields := grpcFields(err); len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("violations %v, want [%s]", fields, tt.field)
			}
			if c := counts(t, s.env); c != (rowCounts{}) {
				t.Fatalf("rows written: %+v", c)
			}
		})
		t.Run("REST/"+tt.name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, req), nil)
			if r.Status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.Status, r.Raw)
			}
			if fields := restFields(r.Body); len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("violations %v, want [%s]: %s", fields, tt.field, r.Raw)
			}
			if c := counts(t, s.env); c != (rowCounts{}) {
				t.Fatalf("rows written: %+v", c)
			}
		})
	}

	// Rules only one transport can break.
	rest := []struct {
		name       string
		body       []byte
		header     http.Header
		wantStatus int
		field      string // "" when the error names no field
	}{
		{name: "malformed JSON", body: []byte(`{"customer_id": "c-1", "items": [`), wantStatus: 400},
		{name: "unknown field", body: []byte(`{"customer_id":"c-1","currency":"EUR","colour":"red","items":[{"sku":"S","quantity":1,"unit_price_cents":1}]}`), wantStatus: 400},
		{name: "quantity not a number", body: []byte(`{"customer_id":"c-1","currency":"EUR","items":[{"sku":"S","quantity":"many","unit_price_cents":1}]}`), wantStatus: 400},
		{name: "body over 1 MiB", body: append(append([]byte(`{"customer_id":"`), bytes.Repeat([]byte("c"), MaxRequestBytes)...), `"}`...), wantStatus: 413},
		{name: "Idempotency-Key empty", body: restJSON(t, validCreate()), header: http.Header{"Idempotency-Key": {""}}, wantStatus: 400, field: "Idempotency-Key"},
		{name: "Idempotency-Key with spaces", body: restJSON(t, validCreate()), header: http.Header{"Idempotency-Key": {"a key"}}, wantStatus: 400, field: "Idempotency-Key"},
		{name: "Idempotency-Key differs from request_id", body: restJSON(t, func() *eventforgev1.CreateOrderRequest {
			r := validCreate()
			r.RequestId = "k-1"
			return r
		}()), header: http.Header{"Idempotency-Key": {"k-2"}}, wantStatus: 400, field: "request_id"},
	}
	for _, tt := range rest {
		t.Run("REST/"+tt.name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/v1/orders", tt.body, tt.header)
			if r.Status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %.300s", r.Status, tt.wantStatus, r.Raw)
			}
			if msg, _ := r.Body["message"].(string); msg == "" {
				t.Fatalf("no message: %.300s", r.Raw)
			}
			if fields := restFields(r.Body); tt.field != "" && (len(fields) != 1 || fields[0] != tt.field) {
				t.Fatalf("violations %v, want [%s]", fields, tt.field)
			}
			if c := counts(t, s.env); c != (rowCounts{}) {
				t.Fatalf("rows written: %+v", c)
			}
		})
	}
	t.Run("gRPC/message over 1 MiB", func(t *testing.T) {
		req := validCreate()
		req.CustomerId = strings.Repeat("c", MaxRequestBytes)
		_, err := s.client.CreateOrder(ctxTimeout(t), req)
		if code := status.Code(err); code != codes.ResourceExhausted {
			t.Fatalf("code %v, want ResourceExhausted (%v)", code, err)
		}
		if c := counts(t, s.env); c != (rowCounts{}) {
			t.Fatalf("rows written: %+v", c)
		}
	})
	t.Run("gRPC/Idempotency-Key metadata differs from request_id", func(t *testing.T) {
		req := validCreate()
		req.RequestId = "k-1"
		ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "idempotency-key", "k-2")
		_, err := s.client.CreateOrder(ctx, req)
		if code, fields := status.Code(err), grpcFields(err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != "request_id" {
			t.Fatalf("got %v %v, want InvalidArgument on request_id", code, fields)
		}
	})

	// Unknown and malformed order IDs on the read and cancel paths.
	const unknown = "0195f5a8-0000-7000-8000-000000000000"
	t.Run("gRPC/unknown order", func(t *testing.T) {
		_, err := s.client.GetOrder(ctxTimeout(t), &eventforgev1.GetOrderRequest{OrderId: unknown})
		if code := status.Code(err); code != codes.NotFound {
			t.Fatalf("get: code %v, want NotFound", code)
		}
		_, err = s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: unknown})
		if code := status.Code(err); code != codes.NotFound {
			t.Fatalf("cancel: code %v, want NotFound", code)
		}
	})
	t.Run("REST/unknown order", func(t *testing.T) {
		if r := s.do(t, http.MethodGet, "/v1/orders/"+unknown, nil, nil); r.Status != http.StatusNotFound {
			t.Fatalf("get: status %d, want 404: %s", r.Status, r.Raw)
		}
		if r := s.do(t, http.MethodPost, "/v1/orders/"+unknown+":cancel", []byte(`{}`), nil); r.Status != http.StatusNotFound {
			t.Fatalf("cancel: status %d, want 404: %s", r.Status, r.Raw)
		}
	})
	t.Run("gRPC/malformed order_id", func(t *testing.T) {
		_, err := s.client.GetOrder(ctxTimeout(t), &eventforgev1.GetOrderRequest{OrderId: "nope"})
		if code, fields := status.Code(err), grpcFields(err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != "order_id" {
			t.Fatalf("got %v %v", code, fields)
		}
		_, err = s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: "nope", Reason: strings.Repeat("r", 501)})
		if code, fields := status.Code(err), grpcFields(err); code != codes.InvalidArgument || strings.Join(fields, ",") != "order_id,reason" {
			t.Fatalf("cancel: got %v %v", code, fields)
		}
	})
	t.Run("REST/malformed order_id", func(t *testing.T) {
		r := s.do(t, http.MethodGet, "/v1/orders/nope", nil, nil)
		if fields := restFields(r.Body); r.Status != http.StatusBadRequest || len(fields) != 1 || fields[0] != "order_id" {
			t.Fatalf("status %d fields %v: %s", r.Status, fields, r.Raw)
		}
	})
	listTests := []struct {
		name, query, field string
		req                *eventforgev1.ListOrdersRequest
	}{
		{"negative page_size", "page_size=-1", "page_size", &eventforgev1.ListOrdersRequest{PageSize: -1}},
		{"bad page_token", "page_token=zzz", "page_token", &eventforgev1.ListOrdersRequest{PageToken: "zzz"}},
		{"long customer_id", "customer_id=" + strings.Repeat("c", 129), "customer_id", &eventforgev1.ListOrdersRequest{CustomerId: strings.Repeat("c", 129)}},
	}
	for _, tt := range listTests {
		t.Run("gRPC/list "+tt.name, func(t *testing.T) {
			_, err := s.client.ListOrders(ctxTimeout(t), tt.req)
			if code, fields := status.Code(err), grpcFields(err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("got %v %v", code, fields)
			}
		})
		t.Run("REST/list "+tt.name, func(t *testing.T) {
			r := s.do(t, http.MethodGet, "/v1/orders?"+tt.query, nil, nil)
			if fields := restFields(r.Body); r.Status != http.StatusBadRequest || len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("status %d fields %v: %s", r.Status, fields, r.Raw)
			}
		})
	}
	if c := counts(t, s.env); c != (rowCounts{}) {
		t.Fatalf("rows written: %+v", c)
	}
}

// TestIdempotentCreateRace: 50 identical concurrent POST /v1/orders with one
// Idempotency-Key create exactly one order and one outbox row; every answer
// names that order. A different request under the key is refused and writes
// nothing.
func TestIdempotentCreateRace(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	const n = 50
	body := restJSON(t, validCreate())
	header := http.Header{"Idempotency-Key": {"race-key-1"}}

	type answer struct {
		status           int
		orderID, eventID string
		raw              string
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.addrs.HTTP+"/v1/orders", bytes.NewReader(body))
			req.Header = header.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] = answer{raw: err.Error()}
				return
			}
			defer resp.Body.Close()
			var out struct {
				Order struct {
					OrderID string `json:"order_id"`
				} `json:"order"`
				EventID string `json:"event_id"`
			}
			raw, _ := io.ReadAll(resp.Body)
			_ = json.Unmarshal(raw, &out)
			answers[i] = answer{status: resp.StatusCode, orderID: out.Order.OrderID, eventID: out.EventID, raw: string(raw)}
		})
	}
	close(start)
	wg.Wait()

	ids := map[string]int{}
	for i, a := range answers {
		if a.status != http.StatusOK {
			t.Errorf("request %d: status %d: %s", i, a.status, a.raw)
			continue
		}
		ids[a.orderID+"/"+a.eventID]++
	}
	if len(ids) != 1 {
		t.Fatalf("answers name %d distinct order/event pairs, want 1: %v", len(ids), ids)
	}
	var orderID string
	for k := range ids {
		orderID = strings.Split(k, "/")[0]
	}
	// Durable state, not answers: one order, one outbox row, one key.
	ctx := ctxTimeout(t)
	var orders, outbox, keys int
	err := s.env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox WHERE aggregateid = $1),
		(SELECT count(*) FROM idempotency_keys WHERE key = 'race-key-1' AND order_id = $1::uuid)`, orderID).Scan(&orders, &outbox, &keys)
	if err != nil {
		t.Fatal(err)
	}
	if orders != 1 || outbox != 1 || keys != 1 {
		t.Fatalf("orders %d, outbox rows %d, keys %d; want 1 each", orders, outbox, keys)
	}
	if c := counts(t, s.env); c.Outbox != 1 || c.Items != 1 {
		t.Fatalf("rows %+v, want one order with one item and one outbox row", c)
	}

	t.Run("gRPC retry with request_id returns the same order", func(t *testing.T) {
		req := validCreate()
		req.RequestId = "race-key-1"
		resp, err := s.client.CreateOrder(ctxTimeout(t), req)
		if err != nil || resp.GetOrder().GetOrderId() != orderID {
			t.Fatalf("got %v, %v; want order %s", resp, err, orderID)
		}
	})
	t.Run("same key, different request", func(t *testing.T) {
		other := validCreate()
		other.Items[0].Quantity = 3
		r := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, other), header)
		if r.Status != http.StatusConflict {
			t.Fatalf("REST status %d, want 409: %s", r.Status, r.Raw)
		}
		other.RequestId = "race-key-1"
		_, err := s.client.CreateOrder(ctxTimeout(t), other)
		if code := status.Code(err); code != codes.AlreadyExists {
			t.Fatalf("gRPC code %v, want AlreadyExists", code)
		}
		if c := counts(t, s.env); c != (rowCounts{Orders: 1, Items: 1, Outbox: 1, Keys: 1}) {
			t.Fatalf("rows %+v after refused requests, want one of each", c)
		}
	})
	t.Run("a new key creates a new order", func(t *testing.T) {
		r := s.do(t, http.MethodPost, "/v1/orders", body, http.Header{"Idempotency-Key": {"race-key-2"}})
		order, _ := r.Body["order"].(map[string]any)
		if r.Status != http.StatusOK || order["order_id"] == orderID {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
	})
}

// TestListCancelAndLog: list filters and pages; cancel writes the status and
// an OrderCancelled outbox row in one transaction, a repeated cancel changes
// nothing; each call logs one line with method, code, duration and order_id.
func TestListCancelAndLog(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	var created []string // newest last
	for i := range 5 {
		req := validCreate()
		req.CustomerId = []string{"alice", "bob"}[i%2]
		resp, err := s.client.CreateOrder(ctxTimeout(t), req)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, resp.GetOrder().GetOrderId())
	}
	alice := []string{created[4], created[2], created[0]} // newest first

	t.Run("gRPC pages by customer", func(t *testing.T) {
		var got []string
		req := &eventforgev1.ListOrdersRequest{CustomerId: "alice", PageSize: 2}
		for pages := 0; ; pages++ {
			if pages > 3 {
				t.Fatal("paging does not end")
			}
			resp, err := s.client.ListOrders(ctxTimeout(t), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range resp.GetOrders() {
				got = append(got, o.GetOrderId())
				if len(o.GetItems()) != 1 || o.GetCustomerId() != "alice" {
					t.Fatalf("order %v", o)
				}
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if strings.Join(got, ",") != strings.Join(alice, ",") {
			t.Fatalf("listed %v, want %v", got, alice)
		}
	})

	t.Run("REST cancel", func(t *testing.T) {
		r := s.do(t, http.MethodPost, "/v1/orders/"+created[0]+":cancel", []byte(`{"reason":"customer request"}`),
			http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
		order, _ := r.Body["order"].(map[string]any)
		if r.Status != http.StatusOK || order["status"] != "ORDER_STATUS_CANCELLED" || r.Body["event_id"] == "" {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
		var typ, payloadReason, traceparent string
		err := s.env.Pool.QueryRow(ctxTimeout(t), `SELECT type, payload->>'reason', headers->>'traceparent' FROM outbox WHERE id = $1::uuid`,
			r.Body["event_id"]).Scan(&typ, &payloadReason, &traceparent)
		if err != nil {
			t.Fatal(err)
		}
		if typ != contract.TypeOrderCancelled || payloadReason != "customer request" || !strings.HasPrefix(traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
			t.Fatalf("outbox row: type %q reason %q traceparent %q", typ, payloadReason, traceparent)
		}
	})
	t.Run("repeated cancel is a no-op", func(t *testing.T) {
		before := counts(t, s.env)
		resp, err := s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: created[0]})
		if err != nil || resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED || resp.GetEventId() != "" {
			t.Fatalf("got %v, %v", resp, err)
		}
		if after := counts(t, s.env); after != before {
			t.Fatalf("rows changed from %+v to %+v", before, after)
		}
	})
	t.Run("cancel from processed", func(t *testing.T) {
		if _, err := s.env.Pool.Exec(ctxTimeout(t), `UPDATE orders SET status = 'processed' WHERE id = $1`, created[1]); err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: created[1]})
		if err != nil || resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED || resp.GetEventId() == "" {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("REST list by status", func(t *testing.T) {
		r := s.do(t, http.MethodGet, "/v1/orders?status=ORDER_STATUS_CANCELLED&page_size=10", nil, nil)
		orders, _ := r.Body["orders"].([]any)
		if r.Status != http.StatusOK || len(orders) != 2 || r.Body["next_page_token"] != "" {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
	})
	t.Run("outbox holds created before cancelled per order", func(t *testing.T) {
		rows, err := s.env.Pool.Query(ctxTimeout(t), `SELECT type FROM outbox WHERE aggregateid = $1 ORDER BY created_at, id`, created[0])
		if err != nil {
			t.Fatal(err)
		}
		types, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || strings.Join(types, ",") != "OrderCreated,OrderCancelled" {
			t.Fatalf("outbox types %v, %v", types, err)
		}
	})
	t.Run("one log line per call", func(t *testing.T) {
		var cancels int
		for _, l := range s.logs.lines("rpc") {
			if l["method"] == "/eventforge.v1.OrderService/CancelOrder" {
				if l["order_id"] == nil || l["code"] != "OK" || l["duration"] == nil {
					t.Fatalf("log line %v lacks order_id, code or duration", l)
				}
				cancels++
			}
		}
		if cancels != 3 {
			t.Fatalf("%d CancelOrder log lines, want 3", cancels)
		}
	})
}

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
		{"post", "/v1/orders", []string{"400", "409", "413", "500", "503", "504"}},
		{"get", "/v1/orders", []string{"400", "500", "503", "504"}},
		{"get", "/v1/orders/{order_id}", []string{"400", "404", "500", "503", "504"}},
		{"post", "/v1/orders/{order_id}:cancel", []string{"400", "404", "413", "500", "503", "504"}},
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
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503: %s", r.Status, r.Raw)
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
