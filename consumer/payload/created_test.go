package payload

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// checkAgreesWithProtojson fails t if decodeCreated accepts data and
// protojson (as Created uses it) refuses it or reads another message.
// It reports whether decodeCreated accepted data.
func checkAgreesWithProtojson(t *testing.T, data string) bool {
	t.Helper()
	got, ok := decodeCreated([]byte(data))
	if !ok {
		return false
	}
	var want eventforgev1.OrderCreated
	if err := unmarshal.Unmarshal([]byte(data), &want); err != nil {
		t.Fatalf("decodeCreated accepted %q, which protojson refuses: %v", data, err)
	}
	if !proto.Equal(got, &want) {
		t.Fatalf("decodeCreated(%q) = %v, protojson reads %v", data, got, &want)
	}
	return true
}

// The forms the api's payloads reach consumers in: jsonb's text (keys by
// length, ", " and ": "), and compact JSON.
const (
	jsonbForm   = `{"items": [{"sku": "SKU-1", "quantity": 2, "unit_price_cents": "1999"}, {"sku": "b.2_x", "quantity": 10000, "unit_price_cents": "1000000000000"}], "currency": "EUR", "order_id": "01a232ab-67fa-7440-90e2-bdefabc44f0c", "create_time": "2026-12-01T17:33:43.802278Z", "customer_id": "c 1 é 日本 😀 <&>", "total_cents": "1000000003998"}`
	compactForm = `{"order_id":"01a232ab-67fa-7440-90e2-bdefabc44f0c","customer_id":"c-1","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":"1999"}],"total_cents":"3998","create_time":"2026-12-01T17:33:43Z"}`
)

func TestDecodeCreatedReadsWhatTheAPIWrites(t *testing.T) {
	for _, data := range []string{jsonbForm, compactForm, "{}", ` { "items" : [ ] } `, `{"total_cents": -5, "items": [{}]}`} {
		if !checkAgreesWithProtojson(t, data) {
			t.Errorf("decodeCreated refused %q; protojson would have to decode it", data)
		}
	}
}

func TestDecodeCreatedLeavesTheRestToProtojson(t *testing.T) {
	for _, data := range []string{
		``, `null`, `[]`, `{`, `{"order_id":"a"`, `{"order_id":"a"} x`, `{"order_id":"a",}`,
		`{"order_id":"a\u0062"}`, `{"order_id":"a\"b"}`, "{\"order_id\":\"a\tb\"}", "{\"order_id\":\"a\xffb\"}",
		`{"orderId":"a"}`, `{"future_field":1}`, `{"order_id":null}`, `{"order_id":1}`,
		`{"order_id":"a","order_id":"b"}`, `{"items":[{"sku":"a","sku":"b"}]}`,
		`{"total_cents":"01"}`, `{"total_cents":"+1"}`, `{"total_cents":" 1"}`, `{"total_cents":"1.0"}`, `{"total_cents":1e3}`,
		`{"total_cents":1.5}`, `{"total_cents":"9223372036854775808"}`, `{"total_cents":"-"}`, `{"total_cents":"1-2"}`,
		`{"items":[{"quantity":2147483648}]}`, `{"items":[{"quantity":"2"}]}`, `{"items":[{"quantity":02}]}`, `{"items":{}}`, `{"items":[1]}`,
		`{"create_time":"2026-12-01T17:33:43.1234567891Z"}`, `{"create_time":"2026-12-01 17:33:43Z"}`, `{"create_time":"0000-12-31T23:59:59Z"}`,
		`{"create_time":1}`,
	} {
		checkAgreesWithProtojson(t, data)
	}
	// Accepted only if protojson agrees (the string form of an int32, a
	// time with an offset); refused otherwise.
	for _, data := range []string{`{"items":[{"quantity":"2"}]}`, `{"create_time":"2026-12-01T17:33:43.5+01:00"}`, `{"total_cents":"-0"}`} {
		checkAgreesWithProtojson(t, data)
	}
}

// TestDecodeCreatedOnMutations: random payloads, written by protojson
// (which varies its spacing), then cut, spliced and byte-flipped; whatever
// decodeCreated accepts must be protojson's message.
func TestDecodeCreatedOnMutations(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "0", "-", "\"", "\\", " ", ",", ":", "{", "}", "[", "]", "1", "e", ".", "\x00", "é", "null", `"items"`, `"sku"`, `"total_cents"`, `"quantity"`, `"order_id"`}
	accepted := 0
	for range 20000 {
		m := &eventforgev1.OrderCreated{OrderId: "01a232ab-67fa-7440-90e2-bdefabc44f0c", CustomerId: "c", Currency: "EUR", TotalCents: r.Int64N(1 << 40)}
		for range r.IntN(3) {
			m.Items = append(m.Items, &eventforgev1.OrderItem{Sku: "S", Quantity: r.Int32N(100), UnitPriceCents: r.Int64N(1 << 30)})
		}
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		data := string(b)
		switch r.IntN(4) {
		case 0: // as written
		case 1:
			i := r.IntN(len(data) + 1)
			data = data[:i] + pieces[r.IntN(len(pieces))] + data[i:]
		case 2:
			i, j := r.IntN(len(data)+1), r.IntN(len(data)+1)
			data = data[:min(i, j)] + data[max(i, j):]
		case 3:
			bs := []byte(data)
			bs[r.IntN(len(bs))] = byte(r.IntN(128))
			data = string(bs)
		}
		if checkAgreesWithProtojson(t, data) {
			accepted++
		}
	}
	if accepted < 5000 {
		t.Fatalf("decodeCreated accepted %d of 20000 payloads; protojson's own output alone is a quarter of them", accepted)
	}
}

func FuzzDecodeCreated(f *testing.F) {
	for _, s := range []string{jsonbForm, compactForm, `{"items":[{"quantity":"2"}]}`, `{"total_cents":"-0"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		checkAgreesWithProtojson(t, data)
	})
}

func BenchmarkDecodeCreated(b *testing.B) {
	data := []byte(jsonbForm)
	b.Run("decodeCreated", func(b *testing.B) {
		for b.Loop() {
			if _, ok := decodeCreated(data); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			var m eventforgev1.OrderCreated
			if err := unmarshal.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
