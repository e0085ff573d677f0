package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/contract"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// fakeStore is a Store with func fields; nil funcs fail the test.
type fakeStore struct {
	t      *testing.T
	create func(o *store.Order, ev store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error)
	get    func(id uuid.UUID) (store.Order, error)
	list   func(q store.ListQuery) ([]store.Order, error)
	cancel func(id uuid.UUID, at time.Time, event store.CancelEventFunc) (store.Cancelled, error)
}

func (f *fakeStore) CreateOrder(_ context.Context, o *store.Order, ev store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error) {
	if f.create == nil {
		f.t.Fatal("CreateOrder called")
	}
	return f.create(o, ev, key)
}

func (f *fakeStore) ListOrders(_ context.Context, q store.ListQuery) ([]store.Order, error) {
	if f.list == nil {
		f.t.Fatal("ListOrders called")
	}
	return f.list(q)
}

func (f *fakeStore) CancelOrder(_ context.Context, id uuid.UUID, at time.Time, event store.CancelEventFunc) (store.Cancelled, error) {
	if f.cancel == nil {
		f.t.Fatal("CancelOrder called")
	}
	return f.cancel(id, at, event)
}

func (f *fakeStore) GetOrder(_ context.Context, id uuid.UUID) (store.Order, error) {
	if f.get == nil {
		f.t.Fatal("GetOrder called")
	}
	return f.get(id)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func validRequest() *eventforgev1.CreateOrderRequest {
	return &eventforgev1.CreateOrderRequest{
		CustomerId: "c-1",
		Currency:   "EUR",
		Items:      []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999}},
	}
}

func violations(t *testing.T, err error) (codes.Code, []string) {
	t.Helper()
	st, _ := status.FromError(err)
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return st.Code(), fields
}

func TestCreateOrderValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*eventforgev1.CreateOrderRequest)
		fields []string
	}{
		{name: "empty customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "" }, fields: []string{"customer_id"}},
		{name: "long customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = strings.Repeat("c", 129) }, fields: []string{"customer_id"}},
		{name: "lower-case currency", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Currency = "eur" }, fields: []string{"currency"}},
		{name: "no items", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items = nil }, fields: []string{"items"}},
		{name: "too many items", mutate: func(r *eventforgev1.CreateOrderRequest) {
			for len(r.Items) <= 100 {
				r.Items = append(r.Items, &eventforgev1.OrderItem{Sku: "S", Quantity: 1})
			}
		}, fields: []string{"items"}},
		{name: "bad sku", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "sku with spaces" }, fields: []string{"items[0].sku"}},
		{name: "zero quantity", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Quantity = 0 }, fields: []string{"items[0].quantity"}},
		{name: "huge quantity", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Quantity = 10_001 }, fields: []string{"items[0].quantity"}},
		{name: "negative price", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].UnitPriceCents = -1 }, fields: []string{"items[0].unit_price_cents"}},
		{name: "price over 10^12", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].UnitPriceCents = 1_000_000_000_001 }, fields: []string{"items[0].unit_price_cents"}},
		{name: "price near 2^63", mutate: func(r *eventforgev1.CreateOrderRequest) {
			r.Items = []*eventforgev1.OrderItem{{Sku: "A", Quantity: 2, UnitPriceCents: math.MaxInt64 / 2}, {Sku: "B", Quantity: 1, UnitPriceCents: 10}}
		}, fields: []string{"items[0].unit_price_cents"}},
		{name: "currency not ISO 4217", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Currency = "XYZ" }, fields: []string{"currency"}},
		{name: "currency test code", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Currency = "XTS" }, fields: []string{"currency"}},
		{name: "currency withdrawn", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Currency = "DEM" }, fields: []string{"currency"}},
		{name: "NUL in customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "a\x00b" }, fields: []string{"customer_id"}},
		{name: "DEL in customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "a\x7fb" }, fields: []string{"customer_id"}},
		{name: "C1 control in customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "a\u0085b" }, fields: []string{"customer_id"}},
		{name: "newline in customer", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId = "c-1\n" }, fields: []string{"customer_id"}},
		{name: "NUL in sku", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Items[0].Sku = "A\x00" }, fields: []string{"items[0].sku"}},
		{name: "NUL in currency", mutate: func(r *eventforgev1.CreateOrderRequest) { r.Currency = "EU\x00" }, fields: []string{"currency"}},
		{name: "NUL in request_id", mutate: func(r *eventforgev1.CreateOrderRequest) { r.RequestId = "k\x00" }, fields: []string{"request_id"}},
		{name: "long customer with NUL is one violation", mutate: func(r *eventforgev1.CreateOrderRequest) {
			r.CustomerId = strings.Repeat("c", 129) + "\x00"
		}, fields: []string{"customer_id"}},
		{name: "several at once", mutate: func(r *eventforgev1.CreateOrderRequest) { r.CustomerId, r.Currency = "", "" }, fields: []string{"customer_id", "currency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(&fakeStore{t: t}, quiet) // any store call fails the test
			req := validRequest()
			tt.mutate(req)
			_, err := srv.CreateOrder(context.Background(), req)
			code, fields := violations(t, err)
			if code != codes.InvalidArgument {
				t.Fatalf("code %v, want InvalidArgument (err %v)", code, err)
			}
			if strings.Join(fields, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("violations %v, want %v", fields, tt.fields)
			}
		})
	}
}

func TestCreateOrderWritesOrderAndEvent(t *testing.T) {
	var gotOrder *store.Order
	var gotEvent store.OutboxEvent
	srv := New(&fakeStore{t: t, create: func(o *store.Order, ev store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error) {
		gotOrder, gotEvent = o, ev
		if key != nil {
			t.Errorf("idempotency key %+v for a request without one", key)
		}
		return store.Created{OrderID: o.ID, EventID: ev.ID}, nil
	}}, quiet)
	req := validRequest()
	req.Items = append(req.Items, &eventforgev1.OrderItem{Sku: "SKU-2", Quantity: 1, UnitPriceCents: 2})
	resp, err := srv.CreateOrder(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if gotOrder.TotalCents != 2*1999+2 || resp.GetOrder().GetTotalCents() != 4000 {
		t.Fatalf("total %d / %d, want 4000", gotOrder.TotalCents, resp.GetOrder().GetTotalCents())
	}
	if gotOrder.Status != store.StatusCreated || resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CREATED {
		t.Fatalf("status %q / %v", gotOrder.Status, resp.GetOrder().GetStatus())
	}
	if gotEvent.AggregateType != contract.AggregateOrder || gotEvent.Type != contract.TypeOrderCreated || gotEvent.AggregateID != gotOrder.ID.String() {
		t.Fatalf("event %+v does not describe order %s", gotEvent, gotOrder.ID)
	}
	if resp.GetEventId() != gotEvent.ID.String() || gotEvent.ID == gotOrder.ID {
		t.Fatalf("event id %s (response %s), order id %s", gotEvent.ID, resp.GetEventId(), gotOrder.ID)
	}
	var payload eventforgev1.OrderCreated
	if err := protojson.Unmarshal(gotEvent.Payload, &payload); err != nil {
		t.Fatalf("payload is not OrderCreated protojson: %v", err)
	}
	if payload.GetOrderId() != gotOrder.ID.String() || payload.GetTotalCents() != 4000 || len(payload.GetItems()) != 2 {
		t.Fatalf("payload %v", &payload)
	}
	if !strings.Contains(string(gotEvent.Payload), `"order_id"`) {
		t.Fatalf("payload does not use proto field names: %s", gotEvent.Payload)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"not found", store.ErrOrderNotFound, codes.NotFound},
		{"unavailable", errors.Join(store.ErrUnavailable, errors.New("dial tcp: connection refused")), codes.Unavailable},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"internal", errors.New("pq: secret internal detail"), codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(&fakeStore{t: t, get: func(uuid.UUID) (store.Order, error) { return store.Order{}, tt.err }}, quiet)
			_, err := srv.GetOrder(context.Background(), &eventforgev1.GetOrderRequest{OrderId: uuid.NewString()})
			st, _ := status.FromError(err)
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v", st.Code(), tt.want)
			}
			if strings.Contains(st.Message(), "secret") || strings.Contains(st.Message(), "dial tcp") {
				t.Fatalf("internal error text reached the client: %q", st.Message())
			}
		})
	}
	t.Run("malformed id", func(t *testing.T) {
		srv := New(&fakeStore{t: t}, quiet)
		_, err := srv.GetOrder(context.Background(), &eventforgev1.GetOrderRequest{OrderId: "nope"})
		if code, fields := violations(t, err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != "order_id" {
			t.Fatalf("got %v %v", code, fields)
		}
	})
}

// TestWriteErrorMapping: a failed create says what it left behind — an
// ErrorInfo with NOT_WRITTEN or OUTCOME_UNKNOWN and the order and event IDs
// — on the code of what cut it short, and never a cause's text.
func TestWriteErrorMapping(t *testing.T) {
	orderID, eventID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	pgDown := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	tests := []struct {
		name       string
		outcome    error
		cause      error
		ctxDone    bool // the caller's deadline has passed
		wantCode   codes.Code
		wantReason string
	}{
		{"unavailable, not written", store.ErrNotWritten, fmt.Errorf("%w: %w", store.ErrUnavailable, pgDown), false, codes.Unavailable, ReasonNotWritten},
		{"serialization failure, not written", store.ErrNotWritten, fmt.Errorf("%w: 40001", store.ErrRetryable), false, codes.Unavailable, ReasonNotWritten},
		{"refused for good, not written", store.ErrNotWritten, errors.New("check violation"), false, codes.Internal, ReasonNotWritten},
		{"answer lost", store.ErrOutcomeUnknown, fmt.Errorf("%w: %w", store.ErrUnavailable, io.ErrUnexpectedEOF), false, codes.Unknown, ReasonOutcomeUnknown},
		{"deadline, answer lost", store.ErrOutcomeUnknown, context.DeadlineExceeded, true, codes.DeadlineExceeded, ReasonOutcomeUnknown},
		{"deadline before the commit", store.ErrNotWritten, context.DeadlineExceeded, true, codes.DeadlineExceeded, ReasonNotWritten},
		{"withdrawn while waiting", store.ErrNotWritten, context.Canceled, false, codes.Canceled, ReasonNotWritten},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(&fakeStore{t: t, create: func(*store.Order, store.OutboxEvent, *store.IdempotencyKey) (store.Created, error) {
				return store.Created{}, &store.WriteError{Outcome: tt.outcome, OrderID: orderID, EventID: eventID, Err: tt.cause}
			}}, quiet)
			ctx := context.Background()
			if tt.ctxDone {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, time.Unix(0, 0))
				defer cancel()
			}
			_, err := srv.CreateOrder(ctx, validRequest())
			st := status.Convert(err)
			if st.Code() != tt.wantCode {
				t.Fatalf("code %v, want %v (%v)", st.Code(), tt.wantCode, err)
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if info.GetReason() != tt.wantReason || info.GetDomain() != ErrorDomain ||
				info.GetMetadata()[MetadataOrderID] != orderID.String() || info.GetMetadata()[MetadataEventID] != eventID.String() {
				t.Fatalf("ErrorInfo %v; want reason %s with order %s and event %s", info, tt.wantReason, orderID, eventID)
			}
			if strings.Contains(st.Message(), "tcp") || strings.Contains(st.Message(), "40001") || strings.Contains(st.Message(), "violation") {
				t.Fatalf("internal error text reached the client: %q", st.Message())
			}
		})
	}
}
