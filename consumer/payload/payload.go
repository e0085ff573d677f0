// Package payload decodes and validates the order events consumers apply:
// protojson of eventforge.v1.OrderCreated and eventforge.v1.OrderCancelled,
// with unknown fields ignored so producers can add fields; and the error
// for an event whose order does not exist.
package payload

import (
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/consumer/engine"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// ErrOrderNotFound means an event names an order that does not exist (or
// is not visible yet). It wraps engine.ErrNotFound: the handler's
// transaction rolls back, so no mark is left without an effect, and the
// engine retries the event, then dead-letters it.
var ErrOrderNotFound = fmt.Errorf("order not found: %w", engine.ErrNotFound)

var (
	unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
	currency  = regexp.MustCompile(`^[A-Z]{3}$`)
)

// Created decodes and validates an OrderCreated event. Errors wrap
// engine.ErrMalformed (does not parse) or engine.ErrInvalid (fails
// validation).
func Created(ev engine.Event) (*eventforgev1.OrderCreated, error) {
	m, ok := decodeCreated(ev.Payload)
	if !ok {
		m = &eventforgev1.OrderCreated{}
		if err := unmarshal.Unmarshal(ev.Payload, m); err != nil {
			return nil, fmt.Errorf("%w: OrderCreated payload: %v", engine.ErrMalformed, err)
		}
	}
	if err := checkOrder(m.GetOrderId(), ev.Key); err != nil {
		return nil, err
	}
	if m.GetCustomerId() == "" {
		return nil, fmt.Errorf("%w: customer_id is empty", engine.ErrInvalid)
	}
	if !currency.MatchString(m.GetCurrency()) {
		return nil, fmt.Errorf("%w: currency %q is not an ISO 4217 code", engine.ErrInvalid, m.GetCurrency())
	}
	if len(m.GetItems()) == 0 {
		return nil, fmt.Errorf("%w: order %s has no items", engine.ErrInvalid, m.GetOrderId())
	}
	var total int64
	for i, it := range m.GetItems() {
		if it.GetQuantity() <= 0 || it.GetUnitPriceCents() < 0 {
			return nil, fmt.Errorf("%w: item %d: quantity %d, unit price %d", engine.ErrInvalid, i, it.GetQuantity(), it.GetUnitPriceCents())
		}
		total += int64(it.GetQuantity()) * it.GetUnitPriceCents()
	}
	if total != m.GetTotalCents() {
		return nil, fmt.Errorf("%w: total_cents %d, items sum to %d", engine.ErrInvalid, m.GetTotalCents(), total)
	}
	return m, nil
}

// Cancelled decodes and validates an OrderCancelled event, like Created.
func Cancelled(ev engine.Event) (*eventforgev1.OrderCancelled, error) {
	var m eventforgev1.OrderCancelled
	if err := unmarshal.Unmarshal(ev.Payload, &m); err != nil {
		return nil, fmt.Errorf("%w: OrderCancelled payload: %v", engine.ErrMalformed, err)
	}
	if err := checkOrder(m.GetOrderId(), ev.Key); err != nil {
		return nil, err
	}
	return &m, nil
}

// checkOrder validates the order ID every order event carries.
func checkOrder(orderID, key string) error {
	if _, err := uuid.Parse(orderID); err != nil {
		return fmt.Errorf("%w: order_id %q is not a UUID", engine.ErrInvalid, orderID)
	}
	if orderID != key {
		return fmt.Errorf("%w: payload order_id %q differs from record key %q", engine.ErrInvalid, orderID, key)
	}
	return nil
}

// Unknown returns the error for an event type no handler knows.
func Unknown(ev engine.Event) error {
	return fmt.Errorf("%w: %q", engine.ErrUnknownType, ev.Type)
}

// OrderNotFound returns the error for an event whose order orderID does
// not exist; it wraps ErrOrderNotFound.
func OrderNotFound(orderID string) error {
	return fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
}
