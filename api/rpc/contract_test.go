package rpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/contract"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

func withKeyHeader(keys ...string) context.Context {
	md := metadata.MD{}
	for _, k := range keys {
		md.Append(IdempotencyKeyMetadata, k)
	}
	return metadata.NewIncomingContext(context.Background(), md)
}

func TestIdempotencyKeyRules(t *testing.T) {
	tests := []struct {
		name    string
		ctx     context.Context
		field   string
		wantKey string
		bad     string // violated field, "" when valid
	}{
		{name: "none", ctx: context.Background()},
		{name: "field", ctx: context.Background(), field: "k-1", wantKey: "k-1"},
		{name: "header", ctx: withKeyHeader("k-2"), wantKey: "k-2"},
		{name: "both equal", ctx: withKeyHeader("k-3"), field: "k-3", wantKey: "k-3"},
		{name: "both differ", ctx: withKeyHeader("k-4"), field: "k-5", bad: "request_id"},
		{name: "empty header", ctx: withKeyHeader(""), bad: IdempotencyKeyHeader},
		{name: "header twice", ctx: withKeyHeader("a", "b"), bad: IdempotencyKeyHeader},
		{name: "field too long", ctx: context.Background(), field: strings.Repeat("k", 256), bad: "request_id"},
		{name: "field longest", ctx: context.Background(), field: strings.Repeat("k", 255), wantKey: strings.Repeat("k", 255)},
		{name: "header too long", ctx: withKeyHeader(strings.Repeat("k", 256)), bad: IdempotencyKeyHeader},
		{name: "header with space", ctx: withKeyHeader("a b"), bad: IdempotencyKeyHeader},
		{name: "header with NUL", ctx: withKeyHeader("a\x00"), bad: IdempotencyKeyHeader},
		{name: "field not ASCII", ctx: context.Background(), field: "ключ", bad: "request_id"},
		{name: "field with DEL", ctx: context.Background(), field: "k\x7f", bad: "request_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotKey *store.IdempotencyKey
			srv := New(&fakeStore{t: t, create: func(_ *store.Order, _ store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error) {
				gotKey = key
				return store.Created{}, nil
			}}, quiet)
			req := validRequest()
			req.RequestId = tt.field
			_, err := srv.CreateOrder(tt.ctx, req)
			if tt.bad != "" {
				if code, fields := violations(t, err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != tt.bad {
					t.Fatalf("%v %v, want one violation of %s (%v)", code, fields, tt.bad, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.wantKey == "" && gotKey != nil:
				t.Fatalf("store got key %q, want none", gotKey.Key)
			case tt.wantKey != "" && (gotKey == nil || gotKey.Key != tt.wantKey):
				t.Fatalf("store got key %+v, want %q", gotKey, tt.wantKey)
			}
		})
	}
}

func TestRequestHash(t *testing.T) {
	base := requestHash(validRequest())
	same := validRequest()
	same.RequestId = "another key does not change the request"
	if string(requestHash(same)) != string(base) {
		t.Fatal("request_id changed the hash")
	}
	changes := map[string]func(*eventforgev1.CreateOrderRequest){
		"customer": func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "c-2" },
		"currency": func(r *eventforgev1.CreateOrderRequest) { r.Currency = "USD" },
		"sku":      func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "SKU-2" },
		"quantity": func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Quantity++ },
		"price":    func(r *eventforgev1.CreateOrderRequest) { r.Items[0].UnitPriceCents++ },
		"item added": func(r *eventforgev1.CreateOrderRequest) {
			r.Items = append(r.Items, &eventforgev1.OrderItem{Sku: "X", Quantity: 1})
		},
		// Field boundaries are length-prefixed: moving a character from one
		// field to the next is a different request.
		"boundary": func(r *eventforgev1.CreateOrderRequest) { r.CustomerId, r.Currency = "c-1E", "UR" },
	}
	for name, change := range changes {
		r := validRequest()
		change(r)
		if string(requestHash(r)) == string(base) {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}

func TestCreateOrderIdempotency(t *testing.T) {
	firstOrder, firstEvent := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	stored := store.Order{ID: firstOrder, CustomerID: "c-1", Currency: "EUR", TotalCents: 3998, Status: store.StatusProcessed,
		Items: []store.Item{{SKU: "SKU-1", Quantity: 2, UnitPriceCents: 1999}}}
	tests := []struct {
		name      string
		created   store.Created
		err       error
		wantCode  codes.Code
		wantOrder uuid.UUID
		wantEvent uuid.UUID
	}{
		{name: "replay returns the first order", created: store.Created{Replayed: true, OrderID: firstOrder, EventID: firstEvent},
			wantCode: codes.OK, wantOrder: firstOrder, wantEvent: firstEvent},
		{name: "key reused", err: store.ErrKeyReused, wantCode: codes.AlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotKey *store.IdempotencyKey
			srv := New(&fakeStore{t: t,
				create: func(_ *store.Order, _ store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error) {
					gotKey = key
					return tt.created, tt.err
				},
				get: func(id uuid.UUID) (store.Order, error) {
					if id != firstOrder {
						t.Errorf("replay read order %s, want %s", id, firstOrder)
					}
					return stored, nil
				},
			}, quiet)
			req := validRequest()
			req.RequestId = "key-1"
			resp, err := srv.CreateOrder(context.Background(), req)
			if gotKey == nil || gotKey.Key != "key-1" || string(gotKey.RequestHash) != string(requestHash(req)) {
				t.Fatalf("store got key %+v", gotKey)
			}
			st, _ := status.FromError(err)
			if st.Code() != tt.wantCode {
				t.Fatalf("code %v, want %v (%v)", st.Code(), tt.wantCode, err)
			}
			if tt.wantCode != codes.OK {
				var reason string
				for _, d := range st.Details() {
					if info, ok := d.(*errdetails.ErrorInfo); ok {
						reason = info.GetReason()
					}
				}
				if reason != ReasonIdempotencyKeyReused {
					t.Fatalf("ErrorInfo reason %q, want %q", reason, ReasonIdempotencyKeyReused)
				}
				return
			}
			if resp.GetOrder().GetOrderId() != tt.wantOrder.String() || resp.GetEventId() != tt.wantEvent.String() {
				t.Fatalf("response %v, want order %s event %s", resp, tt.wantOrder, tt.wantEvent)
			}
		})
	}
}

func TestListOrdersValidation(t *testing.T) {
	srv := New(&fakeStore{t: t}, quiet, WithPageTokenKey([]byte(strings.Repeat("k", MinPageTokenKeyLen))))
	tok := srv.pageTokens.encode(pageToken{CreatedAt: time.Now(), ID: uuid.New(), Filter: filterDigest("c-1", 0)})
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	tampered := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	otherKey := New(&fakeStore{t: t}, quiet).pageTokens.encode(pageToken{CreatedAt: time.Now(), ID: uuid.New(), Filter: filterDigest("c-1", 0)})
	// A token with a far-future position and no valid signature, as a
	// client could build one from the layout.
	forged := base64.RawURLEncoding.EncodeToString(append(append([]byte{pageTokenVersion}, bytes.Repeat([]byte{0x7f}, pageTokenBody-1)...), make([]byte, pageTokenMAC)...))
	tests := []struct {
		name  string
		req   *eventforgev1.ListOrdersRequest
		field string
	}{
		{"long customer", &eventforgev1.ListOrdersRequest{CustomerId: strings.Repeat("c", 129)}, "customer_id"},
		{"NUL in customer", &eventforgev1.ListOrdersRequest{CustomerId: "a\x00b"}, "customer_id"},
		{"unknown status", &eventforgev1.ListOrdersRequest{Status: 42}, "status"},
		{"negative page size", &eventforgev1.ListOrdersRequest{PageSize: -1}, "page_size"},
		{"garbage token", &eventforgev1.ListOrdersRequest{PageToken: "not-a-token"}, "page_token"},
		{"token with NUL", &eventforgev1.ListOrdersRequest{PageToken: "a\x00"}, "page_token"},
		{"forged token", &eventforgev1.ListOrdersRequest{CustomerId: "c-1", PageToken: forged}, "page_token"},
		{"token with a changed position", &eventforgev1.ListOrdersRequest{CustomerId: "c-1", PageToken: tampered(3)}, "page_token"},
		{"token with a changed signature", &eventforgev1.ListOrdersRequest{CustomerId: "c-1", PageToken: tampered(len(raw) - 1)}, "page_token"},
		{"token signed with another key", &eventforgev1.ListOrdersRequest{CustomerId: "c-1", PageToken: otherKey}, "page_token"},
		{"token of other filters", &eventforgev1.ListOrdersRequest{CustomerId: "c-2", PageToken: tok}, "page_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := srv.ListOrders(context.Background(), tt.req)
			code, fields := violations(t, err)
			if code != codes.InvalidArgument || len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("got %v %v, want INVALID_ARGUMENT on %s", code, fields, tt.field)
			}
		})
	}
	t.Run("the untouched token is accepted", func(t *testing.T) {
		q, v, err := srv.validateList(&eventforgev1.ListOrdersRequest{CustomerId: "c-1", PageToken: tok})
		if err != nil || len(v) > 0 || q.After == nil {
			t.Fatalf("query %+v violations %v err %v", q, v, err)
		}
	})
}

func TestListOrdersPaging(t *testing.T) {
	// 5 orders, newest first, pages of 2: the fake honours After and Limit.
	base := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	var all []store.Order
	for i := 5; i > 0; i-- {
		all = append(all, store.Order{ID: uuid.New(), CustomerID: "c-1", Status: store.StatusCreated, CreatedAt: base.Add(time.Duration(i) * time.Second)})
	}
	var queries []store.ListQuery
	srv := New(&fakeStore{t: t, list: func(q store.ListQuery) ([]store.Order, error) {
		queries = append(queries, q)
		start := 0
		if q.After != nil {
			for i, o := range all {
				if o.ID == q.After.ID && o.CreatedAt.Equal(q.After.CreatedAt) {
					start = i + 1
				}
			}
		}
		end := min(start+q.Limit, len(all))
		return all[start:end], nil
	}}, quiet)

	var seen []string
	req := &eventforgev1.ListOrdersRequest{CustomerId: "c-1", Status: eventforgev1.OrderStatus_ORDER_STATUS_CREATED, PageSize: 2}
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("paging does not end")
		}
		resp, err := srv.ListOrders(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.GetOrders() {
			seen = append(seen, o.GetOrderId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if len(seen) != len(all) {
		t.Fatalf("saw %d orders, want %d", len(seen), len(all))
	}
	for i, o := range all {
		if seen[i] != o.ID.String() {
			t.Fatalf("order %d is %s, want %s", i, seen[i], o.ID)
		}
	}
	for _, q := range queries {
		if q.CustomerID != "c-1" || q.Status != store.StatusCreated || q.Limit != 3 {
			t.Fatalf("query %+v, want customer c-1, status created, limit 3 (page size + 1)", q)
		}
	}

	t.Run("page size bounds", func(t *testing.T) {
		for size, want := range map[int32]int{0: DefaultPageSize, 1: 1, MaxPageSize: MaxPageSize, MaxPageSize + 1: MaxPageSize, 1 << 30: MaxPageSize} {
			q, v, err := srv.validateList(&eventforgev1.ListOrdersRequest{PageSize: size})
			if err != nil || len(v) > 0 || q.Limit != want {
				t.Errorf("page_size %d: limit %d violations %v, want %d", size, q.Limit, v, want)
			}
		}
	})
}

func TestPageTokenRoundTrip(t *testing.T) {
	in := pageToken{CreatedAt: time.Date(2026, 11, 30, 5, 1, 2, 345678000, time.UTC), ID: uuid.Must(uuid.NewV7()), Filter: filterDigest("c", 2)}
	tokens := pageTokens{key: randomKey()}
	tok := tokens.encode(in)
	out, err := tokens.decode(tok)
	if err != nil || !out.CreatedAt.Equal(in.CreatedAt) || out.ID != in.ID || out.Filter != in.Filter {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	// The form orders.proto declares (and /openapi.json publishes) is the
	// form the server issues.
	if v, err := checkRules(&eventforgev1.ListOrdersRequest{PageToken: tok}); err != nil || len(v) > 0 {
		t.Fatalf("token %q breaks the page_token rule: %v %v", tok, v, err)
	}
	if filterDigest("ab", 0) == filterDigest("a", 0) || filterDigest("c", 1) == filterDigest("c", 2) {
		t.Fatal("filter digests collide")
	}
}

func TestCancelOrder(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	now := time.Date(2026, 11, 30, 6, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name      string
		storeErr  error
		before    string // status the store holds; "" when storeErr
		wantCode  codes.Code
		wantEvent bool
	}{
		{name: "from created", before: store.StatusCreated, wantCode: codes.OK, wantEvent: true},
		{name: "from processed", before: store.StatusProcessed, wantCode: codes.OK, wantEvent: true},
		{name: "already cancelled", before: store.StatusCancelled, wantCode: codes.OK},
		{name: "unknown order", storeErr: store.ErrOrderNotFound, wantCode: codes.NotFound},
		{name: "not cancellable", storeErr: store.ErrNotCancellable, wantCode: codes.FailedPrecondition},
		{name: "database down", storeErr: store.ErrUnavailable, wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev store.OutboxEvent
			srv := New(&fakeStore{t: t, cancel: func(gotID uuid.UUID, at time.Time, event store.CancelEventFunc) (store.Cancelled, error) {
				if gotID != id {
					t.Errorf("cancel %s, want %s", gotID, id)
				}
				if tt.storeErr != nil {
					return store.Cancelled{}, tt.storeErr
				}
				o := store.Order{ID: id, CustomerID: "c-1", Status: tt.before}
				if tt.before == store.StatusCancelled {
					return store.Cancelled{Order: o}, nil
				}
				o.Status, o.UpdatedAt = store.StatusCancelled, at
				var err error
				ev, err = event(o)
				return store.Cancelled{Order: o, Changed: true, EventID: ev.ID}, err
			}}, quiet)
			srv.now = func() time.Time { return now }
			resp, err := srv.CancelOrder(context.Background(), &eventforgev1.CancelOrderRequest{OrderId: id.String(), Reason: "changed my mind"})
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code %v, want %v (%v)", got, tt.wantCode, err)
			}
			if err != nil {
				return
			}
			if resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED {
				t.Fatalf("status %v", resp.GetOrder().GetStatus())
			}
			if !tt.wantEvent {
				if resp.GetEventId() != "" {
					t.Fatalf("repeated cancel reported event %s", resp.GetEventId())
				}
				return
			}
			if resp.GetEventId() != ev.ID.String() || ev.Type != contract.TypeOrderCancelled || ev.AggregateID != id.String() || ev.AggregateType != contract.AggregateOrder {
				t.Fatalf("event %+v, response event %s", ev, resp.GetEventId())
			}
			var payload eventforgev1.OrderCancelled
			if err := protojson.Unmarshal(ev.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			if payload.GetOrderId() != id.String() || payload.GetReason() != "changed my mind" ||
				!payload.GetCancelTime().AsTime().Equal(now.Truncate(time.Microsecond)) {
				t.Fatalf("payload %v", &payload)
			}
			if !strings.HasPrefix(ev.Headers["traceparent"], "00-") {
				t.Fatalf("no traceparent in headers %v", ev.Headers)
			}
		})
	}
	t.Run("validation", func(t *testing.T) {
		srv := New(&fakeStore{t: t}, quiet)
		_, err := srv.CancelOrder(context.Background(), &eventforgev1.CancelOrderRequest{OrderId: "x", Reason: strings.Repeat("r", 501)})
		code, fields := violations(t, err)
		if code != codes.InvalidArgument || strings.Join(fields, ",") != "order_id,reason" {
			t.Fatalf("got %v %v", code, fields)
		}
		_, err = srv.CancelOrder(context.Background(), &eventforgev1.CancelOrderRequest{OrderId: id.String(), Reason: "changed\x00my mind"})
		if code, fields := violations(t, err); code != codes.InvalidArgument || strings.Join(fields, ",") != "reason" {
			t.Fatalf("reason with NUL: got %v %v", code, fields)
		}
	})
}

func TestTraceHeaders(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	t.Run("continues the caller's trace", func(t *testing.T) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parent, "tracestate", "vendor=1"))
		h := traceHeaders(ctx)
		tp := h["traceparent"]
		if !strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(tp, "-01") || tp == parent {
			t.Fatalf("traceparent %q: want the caller's trace with a new span", tp)
		}
		if h["tracestate"] != "vendor=1" {
			t.Fatalf("tracestate %q", h["tracestate"])
		}
	})
	for name, ctx := range map[string]context.Context{
		"no caller trace":       context.Background(),
		"malformed traceparent": metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "garbage")),
	} {
		t.Run(name, func(t *testing.T) {
			tp := traceHeaders(ctx)["traceparent"]
			parts := strings.Split(tp, "-")
			if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[1] == strings.Repeat("0", 32) {
				t.Fatalf("traceparent %q is not a valid new trace", tp)
			}
		})
	}
}

func TestStoreErrorKeepsInternalsOut(t *testing.T) {
	srv := New(&fakeStore{t: t}, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A driver error seen after the caller went away is reported as the
	// cancellation, not as an internal error.
	err := srv.storeError(ctx, "x", errors.New("read tcp 127.0.0.1: use of closed connection"))
	if status.Code(err) != codes.Canceled || strings.Contains(err.Error(), "tcp") {
		t.Fatalf("got %v", err)
	}
}
