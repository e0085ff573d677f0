package rpc

import (
	"bytes"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// FuzzCreateOrderJSON drives arbitrary REST bodies through the gateway's JSON
// decoding, validation and conversion to the stored order and its event, and
// checks the conversion's invariants for every body that validates. The seed
// corpus is in testdata/fuzz/FuzzCreateOrderJSON and runs with every `go
// test`; `go test -fuzz FuzzCreateOrderJSON ./api/rpc/` explores further.
func FuzzCreateOrderJSON(f *testing.F) {
	f.Add([]byte(`{"customer_id":"c-1","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":1999}]}`))
	f.Add([]byte(`{"customer_id":"c-1","currency":"EUR","items":[{"sku":"A","quantity":"3","unit_price_cents":"9223372036854775807"}]}`))
	f.Add([]byte(`{"customer_id":"a\u0000b","currency":"XYZ","items":[{"sku":"A","quantity":1,"unit_price_cents":"1000000000001"}]}`))
	marshaler := RESTMarshaler()
	sku := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	orderID, eventID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	now := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req eventforgev1.CreateOrderRequest
		if err := marshaler.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
			return // the gateway answers 400
		}
		total, violations, err := validateCreate(&req)
		if err != nil {
			t.Fatalf("rules not evaluated: %v", err)
		}
		if len(violations) > 0 {
			for _, v := range violations {
				if v.GetField() == "" || v.GetDescription() == "" {
					t.Fatalf("violation without field or description: %v", v)
				}
			}
			return
		}
		o, ev, err := newOrder(&req, total, orderID, eventID, now)
		if err != nil {
			t.Fatalf("valid request not convertible: %v", err)
		}
		if len(o.Items) != len(req.GetItems()) || len(o.Items) < 1 || len(o.Items) > 100 {
			t.Fatalf("%d items stored for %d requested", len(o.Items), len(req.GetItems()))
		}
		sum := new(big.Int)
		for i, it := range o.Items {
			in := req.GetItems()[i]
			if it.SKU != in.GetSku() || it.Quantity != in.GetQuantity() || it.UnitPriceCents != in.GetUnitPriceCents() {
				t.Fatalf("item %d stored as %+v from %v", i, it, in)
			}
			if it.Quantity < 1 || it.Quantity > 10_000 || it.UnitPriceCents < 0 || it.UnitPriceCents > 1_000_000_000_000 || !sku.MatchString(it.SKU) {
				t.Fatalf("invalid item %d accepted: %+v", i, it)
			}
			sum.Add(sum, new(big.Int).Mul(big.NewInt(int64(it.Quantity)), big.NewInt(it.UnitPriceCents)))
		}
		if !sum.IsInt64() || sum.Int64() != o.TotalCents {
			t.Fatalf("total %d, items sum to %s", o.TotalCents, sum)
		}
		if !isCurrency(o.Currency) || o.CustomerID == "" || strings.ContainsFunc(o.CustomerID, unicode.IsControl) {
			t.Fatalf("invalid order accepted: %+v", o)
		}
		var payload eventforgev1.OrderCreated
		if err := protojson.Unmarshal(ev.Payload, &payload); err != nil {
			t.Fatalf("payload does not parse: %v", err)
		}
		if payload.GetOrderId() != orderID.String() || payload.GetTotalCents() != o.TotalCents ||
			payload.GetCustomerId() != o.CustomerID || len(payload.GetItems()) != len(o.Items) {
			t.Fatalf("payload %v disagrees with order %+v", &payload, o)
		}
		// A retry of the same body hashes the same: JSON → proto → JSON → proto
		// gives an equal request and an equal idempotency hash.
		again, err := marshaler.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		var req2 eventforgev1.CreateOrderRequest
		if err := marshaler.Unmarshal(again, &req2); err != nil {
			t.Fatalf("re-encoded request does not decode: %v\n%s", err, again)
		}
		if !proto.Equal(&req, &req2) || !bytes.Equal(requestHash(&req), requestHash(&req2)) {
			t.Fatalf("round trip changed the request: %v vs %v", &req, &req2)
		}
	})
}
