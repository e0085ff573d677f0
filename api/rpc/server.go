// Package rpc implements eventforge.v1.OrderService over the order store:
// it validates requests, assigns order and event IDs, builds the events,
// applies idempotency keys, and maps domain errors to gRPC status codes.
// Internal error text never reaches a client.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventforge/eventforge/api/store"
	"github.com/eventforge/eventforge/contract"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Store is what the service needs from the order store (package store
// documents each method's contract).
type Store interface {
	CreateOrder(ctx context.Context, o *store.Order, ev store.OutboxEvent, key *store.IdempotencyKey) (store.Created, error)
	GetOrder(ctx context.Context, id uuid.UUID) (store.Order, error)
	ListOrders(ctx context.Context, q store.ListQuery) ([]store.Order, error)
	CancelOrder(ctx context.Context, id uuid.UUID, at time.Time, event store.CancelEventFunc) (store.Cancelled, error)
}

// Server implements eventforgev1.OrderServiceServer.
type Server struct {
	eventforgev1.UnimplementedOrderServiceServer
	store  Store
	logger *slog.Logger
	now    func() time.Time
	newID  func() (uuid.UUID, error)

	pageTokens pageTokens
}

// Option configures a Server.
type Option func(*Server)

// WithPageTokenKey signs ListOrders page tokens with key (HMAC-SHA256, at
// least MinPageTokenKeyLen bytes). Every process behind one load balancer
// needs the same key, or a token from one is refused by the others. Without
// this option the Server uses a random key of its own.
func WithPageTokenKey(key []byte) Option {
	return func(s *Server) { s.pageTokens = pageTokens{key: append([]byte(nil), key...)} }
}

// New returns a Server backed by s.
func New(s Store, logger *slog.Logger, opts ...Option) *Server {
	srv := &Server{store: s, logger: logger, now: time.Now, newID: uuid.NewV7, pageTokens: pageTokens{key: randomKey()}}
	for _, o := range opts {
		o(srv)
	}
	return srv
}

// payloadJSON is how event payloads are stored in outbox.payload: protojson
// with the proto field names (snake_case), as the REST API speaks.
// OrderCreated, written once per order, has an encoder of its own with the
// same output (appendOrderCreated).
var payloadJSON = protojson.MarshalOptions{UseProtoNames: true}

// CreateOrder validates the request and writes the order and its
// OrderCreated outbox event in one transaction; with an idempotency key, a
// retry of the same request returns the first call's order.
func (s *Server) CreateOrder(ctx context.Context, req *eventforgev1.CreateOrderRequest) (*eventforgev1.CreateOrderResponse, error) {
	key, keyFrom, keyViolations := idempotencyKey(ctx, req)
	checked := req
	if keyFrom == IdempotencyKeyHeader {
		// The header obeys the rules of request_id.
		checked = proto.CloneOf(req)
		checked.RequestId = key
	}
	total, violations, err := validateCreate(checked)
	if err != nil {
		return nil, s.internal(ctx, "validating order", err)
	}
	if keyFrom == IdempotencyKeyHeader {
		renameField(violations, "request_id", IdempotencyKeyHeader)
	}
	violations = append(violations, keyViolations...)
	if len(violations) > 0 {
		return nil, invalidArgument(violations)
	}
	orderID, err := s.newID()
	if err != nil {
		return nil, s.internal(ctx, "generating order id", err)
	}
	eventID, err := s.newID()
	if err != nil {
		return nil, s.internal(ctx, "generating event id", err)
	}
	now := s.now().UTC().Truncate(time.Microsecond) // PostgreSQL's precision
	o, ev, err := newOrder(req, total, orderID, eventID, now)
	if err != nil {
		return nil, s.internal(ctx, "encoding OrderCreated", err)
	}
	ev.Headers = traceHeaders(ctx)
	var idem *store.IdempotencyKey
	if key != "" {
		idem = &store.IdempotencyKey{Key: key, RequestHash: requestHash(req)}
	}
	created, err := s.store.CreateOrder(ctx, o, ev, idem)
	if err != nil {
		return nil, s.storeError(ctx, "creating order", err)
	}
	if created.Replayed {
		stored, err := s.store.GetOrder(ctx, created.OrderID)
		if err != nil {
			return nil, s.storeError(ctx, "reading replayed order", err)
		}
		s.logger.InfoContext(ctx, "order create replayed", "order_id", created.OrderID, "event_id", created.EventID)
		return &eventforgev1.CreateOrderResponse{Order: toProto(stored), EventId: created.EventID.String()}, nil
	}
	if created.Recovered {
		s.logger.WarnContext(ctx, "order created; the commit's answer was lost and the order found committed", "order_id", orderID, "event_id", eventID)
	} else {
		s.logger.InfoContext(ctx, "order created", "order_id", orderID, "event_id", eventID)
	}
	return &eventforgev1.CreateOrderResponse{Order: toProto(*o), EventId: eventID.String()}, nil
}

// newOrder converts a valid request (total as validateCreate computed it)
// into the order to store and its OrderCreated outbox event.
func newOrder(req *eventforgev1.CreateOrderRequest, total int64, orderID, eventID uuid.UUID, now time.Time) (*store.Order, store.OutboxEvent, error) {
	o := &store.Order{
		ID:         orderID,
		CustomerID: req.GetCustomerId(),
		Currency:   req.GetCurrency(),
		TotalCents: total,
		Status:     store.StatusCreated,
		CreatedAt:  now,
		UpdatedAt:  now,
	}
	items := make([]*eventforgev1.OrderItem, 0, len(req.GetItems()))
	for _, it := range req.GetItems() {
		o.Items = append(o.Items, store.Item{SKU: it.GetSku(), Quantity: it.GetQuantity(), UnitPriceCents: it.GetUnitPriceCents()})
		items = append(items, &eventforgev1.OrderItem{Sku: it.GetSku(), Quantity: it.GetQuantity(), UnitPriceCents: it.GetUnitPriceCents()})
	}
	payload, err := appendOrderCreated(make([]byte, 0, 256), &eventforgev1.OrderCreated{
		OrderId:    orderID.String(),
		CustomerId: o.CustomerID,
		Currency:   o.Currency,
		Items:      items,
		TotalCents: total,
		CreateTime: timestamppb.New(now),
	})
	if err != nil {
		return nil, store.OutboxEvent{}, err
	}
	return o, store.OutboxEvent{
		ID:            eventID,
		AggregateType: contract.AggregateOrder,
		AggregateID:   orderID.String(),
		Type:          contract.TypeOrderCreated,
		Payload:       payload,
	}, nil
}

// GetOrder returns one order.
func (s *Server) GetOrder(ctx context.Context, req *eventforgev1.GetOrderRequest) (*eventforgev1.GetOrderResponse, error) {
	id, err := s.orderID(ctx, req, "validating order id")
	if err != nil {
		return nil, err
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return nil, s.storeError(ctx, "reading order", err)
	}
	return &eventforgev1.GetOrderResponse{Order: toProto(o)}, nil
}

// ListOrders returns one page of orders, newest first.
func (s *Server) ListOrders(ctx context.Context, req *eventforgev1.ListOrdersRequest) (*eventforgev1.ListOrdersResponse, error) {
	q, violations, err := s.validateList(req)
	if err != nil {
		return nil, s.internal(ctx, "validating list request", err)
	}
	if len(violations) > 0 {
		return nil, invalidArgument(violations)
	}
	limit := q.Limit
	q.Limit++ // one more tells whether another page follows
	orders, err := s.store.ListOrders(ctx, q)
	if err != nil {
		return nil, s.storeError(ctx, "listing orders", err)
	}
	resp := &eventforgev1.ListOrdersResponse{}
	if len(orders) > limit {
		orders = orders[:limit]
		last := orders[len(orders)-1]
		resp.NextPageToken = s.pageTokens.encode(pageToken{
			CreatedAt: last.CreatedAt, ID: last.ID,
			Filter: filterDigest(req.GetCustomerId(), req.GetStatus()),
		})
	}
	for _, o := range orders {
		resp.Orders = append(resp.Orders, toProto(o))
	}
	return resp, nil
}

// CancelOrder cancels an order and records its OrderCancelled event in the
// same transaction; an already cancelled order is returned unchanged.
func (s *Server) CancelOrder(ctx context.Context, req *eventforgev1.CancelOrderRequest) (*eventforgev1.CancelOrderResponse, error) {
	id, err := s.orderID(ctx, req, "validating cancel request")
	if err != nil {
		return nil, err
	}
	eventID, err := s.newID()
	if err != nil {
		return nil, s.internal(ctx, "generating event id", err)
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	headers := traceHeaders(ctx)
	res, err := s.store.CancelOrder(ctx, id, now, func(o store.Order) (store.OutboxEvent, error) {
		payload, err := payloadJSON.Marshal(&eventforgev1.OrderCancelled{
			OrderId:    o.ID.String(),
			CustomerId: o.CustomerID,
			Reason:     req.GetReason(),
			CancelTime: timestamppb.New(o.UpdatedAt),
		})
		if err != nil {
			return store.OutboxEvent{}, err
		}
		return store.OutboxEvent{
			ID:            eventID,
			AggregateType: contract.AggregateOrder,
			AggregateID:   o.ID.String(),
			Type:          contract.TypeOrderCancelled,
			Payload:       payload,
			Headers:       headers,
		}, nil
	})
	if err != nil {
		return nil, s.storeError(ctx, "cancelling order", err)
	}
	resp := &eventforgev1.CancelOrderResponse{Order: toProto(res.Order)}
	if res.Changed {
		resp.EventId = res.EventID.String()
		s.logger.InfoContext(ctx, "order cancelled", "order_id", id, "event_id", res.EventID)
	}
	return resp, nil
}

func toProto(o store.Order) *eventforgev1.Order {
	p := &eventforgev1.Order{
		OrderId:    o.ID.String(),
		CustomerId: o.CustomerID,
		Currency:   o.Currency,
		TotalCents: o.TotalCents,
		Status:     statusToProto(o.Status),
		CreateTime: timestamppb.New(o.CreatedAt),
		UpdateTime: timestamppb.New(o.UpdatedAt),
	}
	for _, it := range o.Items {
		p.Items = append(p.Items, &eventforgev1.OrderItem{Sku: it.SKU, Quantity: it.Quantity, UnitPriceCents: it.UnitPriceCents})
	}
	return p
}

var statuses = map[eventforgev1.OrderStatus]string{
	eventforgev1.OrderStatus_ORDER_STATUS_CREATED:   store.StatusCreated,
	eventforgev1.OrderStatus_ORDER_STATUS_PROCESSED: store.StatusProcessed,
	eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED: store.StatusCancelled,
}

func statusToProto(s string) eventforgev1.OrderStatus {
	for p, name := range statuses {
		if name == s {
			return p
		}
	}
	return eventforgev1.OrderStatus_ORDER_STATUS_UNSPECIFIED
}

func violation(field, description string) *errdetails.BadRequest_FieldViolation {
	return &errdetails.BadRequest_FieldViolation{Field: field, Description: description}
}

func invalidArgument(violations []*errdetails.BadRequest_FieldViolation) error {
	msg := "invalid request: " + violations[0].GetField() + " " + violations[0].GetDescription()
	if len(violations) > 1 {
		msg += " (and more; see details)"
	}
	st, err := status.New(codes.InvalidArgument, msg).WithDetails(&errdetails.BadRequest{FieldViolations: violations})
	if err != nil {
		return status.Error(codes.InvalidArgument, msg)
	}
	return st.Err()
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo details the service
// attaches to errors a client may branch on.
const ErrorDomain = "eventforge.v1"

// ReasonIdempotencyKeyReused is the ErrorInfo reason of an ALREADY_EXISTS
// answer to a create whose idempotency key names a different request.
const ReasonIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"

// ErrorInfo reasons of a create or cancel that failed, with the metadata
// keys MetadataOrderID and MetadataEventID naming what it was writing.
const (
	// ReasonNotWritten: nothing of the call was written, and nothing of it
	// will be: it may be sent again as it is, with or without a key.
	ReasonNotWritten = "NOT_WRITTEN"
	// ReasonOutcomeUnknown: the commit was sent and its answer lost, and the
	// server could not find out whether it took effect: the order (or the
	// cancel) may exist. GetOrder of MetadataOrderID tells; a create may be
	// sent again only under the same idempotency key.
	ReasonOutcomeUnknown = "OUTCOME_UNKNOWN"

	MetadataOrderID = "order_id"
	MetadataEventID = "event_id"
)

// storeError maps a store error to a status; the cause is logged, never sent.
func (s *Server) storeError(ctx context.Context, what string, err error) error {
	var we *store.WriteError
	if errors.As(err, &we) {
		return s.writeError(ctx, what, we)
	}
	// The caller's deadline or cancellation is what cut the call short, even
	// when the driver reports it as a network error.
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w (%w)", ctxErr, err)
	}
	switch {
	case errors.Is(err, store.ErrOrderNotFound):
		return status.Error(codes.NotFound, "order not found")
	case errors.Is(err, store.ErrKeyReused):
		s.logger.InfoContext(ctx, what, "err", err)
		st, derr := status.New(codes.AlreadyExists,
			"the idempotency key (request_id / Idempotency-Key) was already used for a different request; use a new key for a new request").
			WithDetails(&errdetails.ErrorInfo{Reason: ReasonIdempotencyKeyReused, Domain: ErrorDomain})
		if derr != nil {
			return status.Error(codes.AlreadyExists, "idempotency key already used for a different request")
		}
		return st.Err()
	case errors.Is(err, store.ErrNotCancellable):
		return status.Error(codes.FailedPrecondition, "the order cannot be cancelled in its current status")
	case errors.Is(err, context.DeadlineExceeded):
		s.logger.WarnContext(ctx, what, "err", err)
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, store.ErrUnavailable):
		s.logger.WarnContext(ctx, what, "err", err)
		return status.Error(codes.Unavailable, "the order store is unavailable; retry later")
	}
	return s.internal(ctx, what, err)
}

// writeError maps a failed create or cancel to a status that says what it
// left behind: an ErrorInfo with ReasonNotWritten or ReasonOutcomeUnknown
// and the order and event IDs, on the code of what cut it short. The code
// alone is not the answer to "was it written": a deadline that ran out
// (DEADLINE_EXCEEDED) ends a call whatever it left, as a client's own
// deadline does.
func (s *Server) writeError(ctx context.Context, what string, we *store.WriteError) error {
	unknown := errors.Is(we, store.ErrOutcomeUnknown)
	reason, left := ReasonNotWritten, "nothing was written"
	if unknown {
		reason = ReasonOutcomeUnknown
		left = fmt.Sprintf("the commit was sent and its answer lost: order %s may exist; "+
			"read it (GetOrder) or retry with the same idempotency key", we.OrderID)
	}
	var (
		code  codes.Code
		cause string
		level = slog.LevelWarn
	)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(we, context.DeadlineExceeded):
		code, cause = codes.DeadlineExceeded, "deadline exceeded"
	case unknown:
		code, cause = codes.Unknown, "outcome unknown"
	case errors.Is(we, context.Canceled):
		code, cause = codes.Canceled, "request cancelled"
	case errors.Is(we, store.ErrUnavailable), errors.Is(we, store.ErrRetryable):
		code, cause = codes.Unavailable, "the order store is unavailable; retry later"
	default:
		code, cause, level = codes.Internal, "internal error", slog.LevelError
	}
	s.logger.Log(ctx, level, what, "order_id", we.OrderID, "event_id", we.EventID, "outcome", reason, "err", we.Err)
	msg := cause + "; " + left
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: reason, Domain: ErrorDomain,
		Metadata: map[string]string{MetadataOrderID: we.OrderID.String(), MetadataEventID: we.EventID.String()},
	})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

func (s *Server) internal(ctx context.Context, what string, err error) error {
	s.logger.ErrorContext(ctx, what, "err", err)
	return status.Error(codes.Internal, "internal error")
}
