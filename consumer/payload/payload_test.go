package payload

import (
	"errors"
	"testing"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/contract"
)

const orderID = "0195f5a8-0000-7000-8000-000000000001"

func TestCreated(t *testing.T) {
	valid := `{"order_id":"` + orderID + `","customer_id":"c-1","currency":"EUR","items":[{"sku":"S","quantity":2,"unit_price_cents":1999}],"total_cents":3998,"future_field":1}`
	tests := []struct {
		name    string
		key     string
		payload string
		wantErr error
	}{
		{"valid, unknown field ignored", orderID, valid, nil},
		{"not JSON", orderID, `{"order_id":`, engine.ErrMalformed},
		{"wrong field type", orderID, `{"order_id":1}`, engine.ErrMalformed},
		{"key differs", "0195f5a8-0000-7000-8000-000000000002", valid, engine.ErrInvalid},
		{"order id not a UUID", "o-1", `{"order_id":"o-1","customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":1}],"total_cents":1}`, engine.ErrInvalid},
		{"no customer", orderID, `{"order_id":"` + orderID + `","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":1}],"total_cents":1}`, engine.ErrInvalid},
		{"bad currency", orderID, `{"order_id":"` + orderID + `","customer_id":"c","currency":"eur","items":[{"sku":"S","quantity":1,"unit_price_cents":1}],"total_cents":1}`, engine.ErrInvalid},
		{"no items", orderID, `{"order_id":"` + orderID + `","customer_id":"c","currency":"EUR","total_cents":0}`, engine.ErrInvalid},
		{"zero quantity", orderID, `{"order_id":"` + orderID + `","customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":0,"unit_price_cents":1}],"total_cents":0}`, engine.ErrInvalid},
		{"wrong total", orderID, `{"order_id":"` + orderID + `","customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":2,"unit_price_cents":5}],"total_cents":11}`, engine.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Created(engine.Event{Key: tt.key, Type: contract.TypeOrderCreated, Payload: []byte(tt.payload)})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err == nil && (m.GetOrderId() != orderID || m.GetTotalCents() != 3998) {
				t.Fatalf("decoded %v", m)
			}
			if err != nil && engine.Classify(err) != engine.ClassPermanent {
				t.Fatalf("class %s, want permanent", engine.Classify(err))
			}
		})
	}
}

func TestCancelled(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		payload string
		wantErr error
	}{
		{"valid", orderID, `{"order_id":"` + orderID + `","customer_id":"c-1","reason":"changed mind"}`, nil},
		{"valid without customer", orderID, `{"order_id":"` + orderID + `"}`, nil},
		{"not JSON", orderID, `nope`, engine.ErrMalformed},
		{"key differs", "x", `{"order_id":"` + orderID + `"}`, engine.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Cancelled(engine.Event{Key: tt.key, Type: contract.TypeOrderCancelled, Payload: []byte(tt.payload)})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestUnknownIsPermanent(t *testing.T) {
	if c := engine.Classify(Unknown(engine.Event{Type: "OrderShipped"})); c != engine.ClassPermanent {
		t.Fatalf("class %s, want permanent", c)
	}
}

func TestOrderNotFound(t *testing.T) {
	err := OrderNotFound(orderID)
	if !errors.Is(err, ErrOrderNotFound) || !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("%v does not wrap both ErrOrderNotFound and engine.ErrNotFound", err)
	}
	if got, want := err.Error(), "order "+orderID+": order not found: subject not found"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}
