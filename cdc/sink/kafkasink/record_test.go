package kafkasink

import (
	"testing"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
)

func TestCloudEventType(t *testing.T) {
	tests := []struct{ agg, typ, want string }{
		{"order", contract.TypeOrderCreated, "eventforge.order.created.v1"},
		{"order", contract.TypeOrderCancelled, "eventforge.order.cancelled.v1"},
		{"order", "OrderItemAdded", "eventforge.order.item.added.v1"},
		{"payment", "Captured", "eventforge.payment.captured.v1"},
	}
	for _, tt := range tests {
		if got := CloudEventType(tt.agg, tt.typ); got != tt.want {
			t.Errorf("CloudEventType(%q, %q) = %q, want %q", tt.agg, tt.typ, got, tt.want)
		}
	}
}

func TestRecord(t *testing.T) {
	ev := &decode.Event{
		ID: "e-1", AggregateType: contract.AggregateOrder, AggregateID: "o-1", Type: contract.TypeOrderCreated,
		Payload: []byte(`{"order_id":"o-1"}`), Headers: map[string]string{"traceparent": "00-abc-def-01"},
		CreatedAt: "2026-11-30 05:00:01.5+00",
	}
	m := Record(ev, contract.Topic)
	if *m.TopicPartition.Topic != contract.Topic || string(m.Key) != "o-1" || string(m.Value) != `{"order_id":"o-1"}` {
		t.Fatalf("record %v key %q value %q", m.TopicPartition, m.Key, m.Value)
	}
	got := map[string]string{}
	for _, h := range m.Headers {
		if _, dup := got[h.Key]; dup {
			t.Fatalf("header %s twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{
		contract.HeaderID: "e-1", contract.HeaderType: contract.TypeOrderCreated, contract.HeaderCESpecVersion: contract.CESpecVersion, contract.HeaderCEID: "e-1",
		contract.HeaderCEType: "eventforge.order.created.v1", contract.HeaderCESource: "/eventforge/order",
		contract.HeaderCETime: "2026-11-30T05:00:01.5Z", contract.HeaderContentType: contract.ContentTypeJSON, "traceparent": "00-abc-def-01",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("headers %v, want %v", got, want)
	}
}
