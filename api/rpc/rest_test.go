package rpc

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// TestRESTBodyForm: the gateway reads a request body only in the form
// /openapi.json describes, where proto3 JSON would take more.
func TestRESTBodyForm(t *testing.T) {
	body := func(item string) string {
		return `{"customer_id":"c","currency":"EUR","items":[` + item + `]}`
	}
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"canonical", body(`{"sku":"S","quantity":2,"unit_price_cents":"1999"}`), true},
		{"zero price", body(`{"sku":"S","quantity":2,"unit_price_cents":"0"}`), true},
		{"null price", body(`{"sku":"S","quantity":2,"unit_price_cents":null}`), true},
		{"negative price reaches the rules", body(`{"sku":"S","quantity":2,"unit_price_cents":"-5"}`), true},
		{"price as a number", body(`{"sku":"S","quantity":2,"unit_price_cents":1999}`), true},
		{"price as a number with a fraction", body(`{"sku":"S","quantity":2,"unit_price_cents":1999.0}`), false},
		{"price as a number with an exponent", body(`{"sku":"S","quantity":2,"unit_price_cents":2e3}`), false},
		{"price as a boolean", body(`{"sku":"S","quantity":2,"unit_price_cents":true}`), false},
		{"price with an exponent", body(`{"sku":"S","quantity":2,"unit_price_cents":"1e3"}`), false},
		{"price with a leading zero", body(`{"sku":"S","quantity":2,"unit_price_cents":"01"}`), false},
		{"price minus zero", body(`{"sku":"S","quantity":2,"unit_price_cents":"-0"}`), false},
		{"price with a space", body(`{"sku":"S","quantity":2,"unit_price_cents":" 1"}`), false},
		{"quantity as a string", body(`{"sku":"S","quantity":"2","unit_price_cents":"1"}`), false},
		{"quantity with a fraction", body(`{"sku":"S","quantity":2.0,"unit_price_cents":"1"}`), false},
		{"quantity with an exponent", body(`{"sku":"S","quantity":2e0,"unit_price_cents":"1"}`), false},
		{"JSON name of a field", `{"customerId":"c","currency":"EUR","items":[{"sku":"S","quantity":2,"unit_price_cents":"1"}]}`, false},
		{"JSON name of an item field", body(`{"sku":"S","quantity":2,"unitPriceCents":"1"}`), false},
		{"unknown field", `{"customer_id":"c","currency":"EUR","x":1,"items":[]}`, false},
		{"trailing data", body(`{"sku":"S","quantity":2,"unit_price_cents":"1"}`) + ` {}`, false},
		{"white space only", " \t\n", false},
		{"not UTF-8", "\xc3\x28", false},
		{"not UTF-8 in a string", body(`{"sku":"S\xff","quantity":2,"unit_price_cents":"1"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RESTMarshaler().NewDecoder(strings.NewReader(tt.body)).Decode(&eventforgev1.CreateOrderRequest{})
			if (err == nil) != tt.ok {
				t.Fatalf("decode %s: %v, want ok=%v", tt.body, err, tt.ok)
			}
			if err != nil && !utf8.ValidString(err.Error()) {
				t.Fatalf("error text %q is not UTF-8: the gateway could not send it", err)
			}
		})
	}
	if err := RESTMarshaler().NewDecoder(strings.NewReader(`{"order_id":"0190a6f0-0000-7000-8000-000000000001"}`)).Decode(&eventforgev1.CancelOrderRequest{}); err == nil {
		t.Fatal("cancel body with order_id accepted; the route takes it from the path")
	}
	if err := RESTMarshaler().NewDecoder(strings.NewReader(`{"reason":"r"}`)).Decode(&eventforgev1.CancelOrderRequest{}); err != nil {
		t.Fatalf("cancel body: %v", err)
	}
	var req eventforgev1.CancelOrderRequest
	if err := RESTMarshaler().NewDecoder(strings.NewReader("")).Decode(&req); !errors.Is(err, io.EOF) {
		t.Fatalf("empty body: %v, want io.EOF (an empty message)", err)
	}
}

// TestRESTBodyRefusals: a refused body names the field at fault, in the
// form of protovalidate's field paths, and says what is wrong in the
// document's terms.
func TestRESTBodyRefusals(t *testing.T) {
	item := func(fields string) string {
		return `{"customer_id":"c","currency":"EUR","items":[{"sku":"S",` + fields + `}]}`
	}
	tests := []struct {
		name, body, field, desc string
	}{
		{"a string", `"abc"`, "", "not a JSON object"},
		{"an array", `[]`, "", "not a JSON object"},
		{"a field twice", `{"currency":"EUR","currency":"USD"}`, "currency", "more than once"},
		{"an item field twice", item(`"quantity":1,"quantity":2`), "items[0].quantity", "more than once"},
		{"unknown field", `{"colour":"red"}`, "colour", "not a field of CreateOrderRequest"},
		{"quantity beyond 32 bits", item(`"quantity":2147483648`), "items[0].quantity", "out of range for a 32-bit integer"},
		{"quantity at 32 bits", item(`"quantity":2147483647`), "", ""},
		{"price beyond 64 bits", item(`"unit_price_cents":"9223372036854775808"`), "items[0].unit_price_cents", "out of range for a 64-bit integer"},
		{"a number for a string", `{"customer_id":1}`, "customer_id", "must be a JSON string"},
		{"an object for a string", `{"customer_id":{}}`, "customer_id", "must be a JSON string"},
		{"a string for the items", `{"items":"x"}`, "items", "must be a JSON array"},
		{"a string for an item", `{"items":["x"]}`, "items[0]", "must be a JSON object"},
		{"null for an item", `{"items":[{"sku":"S"},null]}`, "items[1]", "must not be null"},
		{"null for the items", `{"items":null}`, "", ""},
		{"byte order mark", "\uFEFF{}", "", "byte order mark"},
		{"too deep", strings.Repeat(`{"items":[`, 9) + strings.Repeat("]}", 9), "", "levels deep"},
		{"brackets in a string are not depth", `{"customer_id":"` + strings.Repeat("[", 100) + `"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RESTMarshaler().NewDecoder(strings.NewReader(tt.body)).Decode(&eventforgev1.CreateOrderRequest{})
			if tt.desc == "" {
				if err != nil {
					t.Fatalf("decode %s: %v, want it read", tt.body, err)
				}
				return
			}
			var be *BodyError
			if !errors.As(err, &be) || be.Field != tt.field || !strings.Contains(be.Description, tt.desc) {
				t.Fatalf("decode %.80s: %#v, want field %q saying %q", tt.body, err, tt.field, tt.desc)
			}
			if strings.Contains(err.Error(), "proto:") {
				t.Fatalf("protojson's text in %q", err)
			}
		})
	}
}
