package rpc

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// checkSameAsProtojson fails t unless appendOrderCreated and protojson
// (payloadJSON) agree on m: both refuse it, or both write the same JSON
// value, which protojson reads back as m.
func checkSameAsProtojson(t *testing.T, m *eventforgev1.OrderCreated) {
	t.Helper()
	checkEncoderIsProtojson(t, encoders["eventforge.v1.OrderCreated"], m)
}

// checkEncoderIsProtojson fails t unless encode and protojson (payloadJSON)
// agree on m: both refuse it, or both write the same JSON value, which
// protojson reads back as m.
func checkEncoderIsProtojson(t *testing.T, encode func(proto.Message) ([]byte, error), m proto.Message) {
	t.Helper()
	want, wantErr := payloadJSON.Marshal(m)
	got, err := encode(m)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("encoding %v: error %v, protojson's %v", m, err, wantErr)
	}
	if err != nil {
		return
	}
	var gotValue, wantValue any
	if err := json.Unmarshal(got, &gotValue); err != nil {
		t.Fatalf("encoding %v wrote %s, not JSON: %v", m, got, err)
	}
	if err := json.Unmarshal(want, &wantValue); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotValue, wantValue) {
		t.Fatalf("encoding %v:\n got %s\nwant %s", m, got, want)
	}
	back := m.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(got, back); err != nil {
		t.Fatalf("protojson refuses %s: %v", got, err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("protojson reads %s as %v, want %v", got, back, m)
	}
}

func TestOrderCreatedPayloadIsProtojsons(t *testing.T) {
	created := time.Date(2026, 12, 1, 18, 4, 5, 0, time.UTC)
	cases := map[string]*eventforgev1.OrderCreated{
		"typical": {
			OrderId: "01938a2e-7b7c-7cc4-9d0e-2f1a3b4c5d6e", CustomerId: "c-1", Currency: "EUR",
			Items: []*eventforgev1.OrderItem{
				{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999},
				{Sku: "b.2_x", Quantity: 10000, UnitPriceCents: 1_000_000_000_000},
			},
			TotalCents: 10_000_000_003_998, CreateTime: timestamppb.New(created.Add(123456 * time.Microsecond)),
		},
		"escapes": {
			OrderId: "o", CustomerId: "q\"b\\s/\b\f\n\r\t\x00\x01\x1f\x7f é 日本 😀 \u2028\u2029 <&>", Currency: "EUR",
			Items:      []*eventforgev1.OrderItem{{Sku: "\"", Quantity: 1}},
			CreateTime: timestamppb.New(created),
		},
		"zero values":              {},
		"an empty item":            {Items: []*eventforgev1.OrderItem{{}, {Sku: "s"}}},
		"negative numbers":         {TotalCents: -5, Items: []*eventforgev1.OrderItem{{Quantity: -1, UnitPriceCents: -2}}},
		"milliseconds":             {CreateTime: timestamppb.New(created.Add(7 * time.Millisecond))},
		"microseconds":             {CreateTime: timestamppb.New(created.Add(7 * time.Microsecond))},
		"nanoseconds":              {CreateTime: timestamppb.New(created.Add(7))},
		"the epoch":                {CreateTime: &timestamppb.Timestamp{}},
		"year one":                 {CreateTime: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))},
		"not UTC":                  {CreateTime: timestamppb.New(time.Date(2026, 6, 1, 23, 30, 0, 5e8, time.FixedZone("X", 5*3600)))},
		"out of range":             {CreateTime: &timestamppb.Timestamp{Seconds: -62135596801}},
		"bad nanos":                {CreateTime: &timestamppb.Timestamp{Nanos: 1e9}},
		"invalid UTF-8":            {CustomerId: "a\xffb"},
		"invalid UTF-8 in an item": {Items: []*eventforgev1.OrderItem{{Sku: "\xc3"}}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) { checkSameAsProtojson(t, m) })
	}
}

// TestOrderCreatedPayloadMatchesProtojsonOnRandomOrders compares the two
// encoders on orders drawn from strings with every kind of character JSON
// treats specially, and times of every precision.
func TestOrderCreatedPayloadMatchesProtojsonOnRandomOrders(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", "-", "\"", "\\", "/", "\n", "\x00", "\x1f", "\x7f", "é", "日", "😀", "\u2028", "<", "&", " "}
	randString := func() string {
		var s strings.Builder
		for range r.IntN(6) {
			s.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return s.String()
	}
	precisions := []time.Duration{time.Second, time.Millisecond, time.Microsecond, 1}
	for range 2000 {
		m := &eventforgev1.OrderCreated{
			OrderId: randString(), CustomerId: randString(), Currency: randString(),
			TotalCents: r.Int64N(1<<40) - 1<<39,
		}
		for range r.IntN(4) {
			m.Items = append(m.Items, &eventforgev1.OrderItem{Sku: randString(), Quantity: r.Int32N(20) - 2, UnitPriceCents: r.Int64N(3) * r.Int64()})
		}
		if r.IntN(8) > 0 {
			ts := time.Unix(r.Int64N(1<<35)-1<<34, r.Int64N(1e9)).Truncate(precisions[r.IntN(len(precisions))])
			m.CreateTime = timestamppb.New(ts)
		}
		checkSameAsProtojson(t, m)
	}
}

func FuzzOrderCreatedPayload(f *testing.F) {
	f.Add("c-1", "EUR", "SKU-1", int32(2), int64(1999), int64(3998), int64(1764612245), int32(123456000))
	f.Add("\"\\\x00", "", "😀", int32(0), int64(0), int64(-1), int64(-62135596800), int32(1))
	f.Fuzz(func(t *testing.T, customer, currency, sku string, quantity int32, price, total, seconds int64, nanos int32) {
		checkSameAsProtojson(t, &eventforgev1.OrderCreated{
			OrderId: "o", CustomerId: customer, Currency: currency, TotalCents: total,
			Items:      []*eventforgev1.OrderItem{{Sku: sku, Quantity: quantity, UnitPriceCents: price}},
			CreateTime: &timestamppb.Timestamp{Seconds: seconds, Nanos: nanos},
		})
	})
}

func BenchmarkOrderCreatedPayload(b *testing.B) {
	m := &eventforgev1.OrderCreated{
		OrderId: "01938a2e-7b7c-7cc4-9d0e-2f1a3b4c5d6e", CustomerId: "c-1", Currency: "EUR",
		Items:      []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999}, {Sku: "SKU-2", Quantity: 1, UnitPriceCents: 500}},
		TotalCents: 4498, CreateTime: timestamppb.New(time.Date(2026, 12, 1, 18, 4, 5, 123456000, time.UTC)),
	}
	b.Run("appendOrderCreated", func(b *testing.B) {
		for b.Loop() {
			if _, err := appendOrderCreated(make([]byte, 0, 256), m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			if _, err := payloadJSON.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
