// Package rpc implements eventforge.v1.OrderService over the order store:
// it validates requests, assigns the order ID and event ID, builds the
// OrderCreated event, and maps domain errors to gRPC status codes. Internal
// error text never reaches a client.
package rpc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventforge/eventforge/api/store"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Store is what the service needs from the order store.
type Store interface {
	CreateOrder(ctx context.Context, o *store.Order, ev store.OutboxEvent) error
	GetOrder(ctx context.Context, id uuid.UUID) (store.Order, error)
}

// Server implements eventforgev1.OrderServiceServer.
type Server struct {
	eventforgev1.UnimplementedOrderServiceServer
	store  Store
	logger *slog.Logger
}

// New returns a Server backed by s.
func New(s Store, logger *slog.Logger) *Server {
	return &Server{store: s, logger: logger}
}

// payloadJSON is how event payloads are stored in outbox.payload: protojson
// with the proto field names (snake_case), as the REST API speaks.
var payloadJSON = protojson.MarshalOptions{UseProtoNames: true}

// CreateOrder validates the request and writes the order and its
// OrderCreated outbox event in one transaction.
func (s *Server) CreateOrder(ctx context.Context, req *eventforgev1.CreateOrderRequest) (*eventforgev1.CreateOrderResponse, error) {
	total, violations := validateCreate(req)
	if len(violations) > 0 {
		return nil, invalidArgument(violations)
	}
	orderID, err := uuid.NewV7()
	if err != nil {
		return nil, s.internal(ctx, "generating order id", err)
	}
	eventID, err := uuid.NewV7()
	if err != nil {
		return nil, s.internal(ctx, "generating event id", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond) // PostgreSQL's precision
	o := &store.Order{
		ID:         orderID,
		CustomerID: req.GetCustomerId(),
		Currency:   req.GetCurrency(),
		TotalCents: total,
		Status:     store.StatusCreated,
		CreatedAt:  now,
		UpdatedAt:  now,
	}
	for _, it := range req.GetItems() {
		o.Items = append(o.Items, store.Item{SKU: it.GetSku(), Quantity: it.GetQuantity(), UnitPriceCents: it.GetUnitPriceCents()})
	}
	payload, err := payloadJSON.Marshal(&eventforgev1.OrderCreated{
		OrderId:    orderID.String(),
		CustomerId: o.CustomerID,
		Currency:   o.Currency,
		Items:      req.GetItems(),
		TotalCents: total,
		CreateTime: timestamppb.New(now),
	})
	if err != nil {
		return nil, s.internal(ctx, "encoding OrderCreated", err)
	}
	ev := store.OutboxEvent{
		ID:            eventID,
		AggregateType: "order",
		AggregateID:   orderID.String(),
		Type:          "OrderCreated",
		Payload:       payload,
	}
	if err := s.store.CreateOrder(ctx, o, ev); err != nil {
		return nil, s.storeError(ctx, "creating order", err)
	}
	s.logger.InfoContext(ctx, "order created", "order_id", orderID, "event_id", eventID)
	return &eventforgev1.CreateOrderResponse{Order: toProto(*o), EventId: eventID.String()}, nil
}

// GetOrder returns one order.
func (s *Server) GetOrder(ctx context.Context, req *eventforgev1.GetOrderRequest) (*eventforgev1.GetOrderResponse, error) {
	id, err := uuid.Parse(req.GetOrderId())
	if err != nil {
		return nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{{Field: "order_id", Description: "must be a UUID"}})
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return nil, s.storeError(ctx, "reading order", err)
	}
	return &eventforgev1.GetOrderResponse{Order: toProto(o)}, nil
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

func statusToProto(s string) eventforgev1.OrderStatus {
	switch s {
	case store.StatusCreated:
		return eventforgev1.OrderStatus_ORDER_STATUS_CREATED
	case store.StatusProcessed:
		return eventforgev1.OrderStatus_ORDER_STATUS_PROCESSED
	case store.StatusCancelled:
		return eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED
	}
	return eventforgev1.OrderStatus_ORDER_STATUS_UNSPECIFIED
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

// storeError maps a store error to a status; the cause is logged, never sent.
func (s *Server) storeError(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, store.ErrOrderNotFound):
		return status.Error(codes.NotFound, "order not found")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, store.ErrUnavailable):
		s.logger.WarnContext(ctx, what, "err", err)
		return status.Error(codes.Unavailable, "the order store is unavailable; retry later")
	}
	return s.internal(ctx, what, err)
}

func (s *Server) internal(ctx context.Context, what string, err error) error {
	s.logger.ErrorContext(ctx, what, "err", err)
	return status.Error(codes.Internal, "internal error")
}
