package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

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
