package contract_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/eventforge/eventforge/contract"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// The event types are the names of their payload messages.
func TestEventTypesNameTheirMessages(t *testing.T) {
	tests := []struct {
		typ string
		msg proto.Message
	}{
		{contract.TypeOrderCreated, &eventforgev1.OrderCreated{}},
		{contract.TypeOrderCancelled, &eventforgev1.OrderCancelled{}},
	}
	for _, tt := range tests {
		if got := tt.msg.ProtoReflect().Descriptor().Name(); got != protoreflect.Name(tt.typ) {
			t.Errorf("event type %q, payload message %q", tt.typ, got)
		}
	}
}

// The names are the wire format: records already in Kafka, consumers of
// other teams and docs/events.md depend on these exact values. This table is
// the one place that spells them; changing one is a breaking change of the
// contract, not a rename.
func TestWireValues(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"HeaderID", contract.HeaderID, "id"},
		{"HeaderType", contract.HeaderType, "type"},
		{"HeaderCESpecVersion", contract.HeaderCESpecVersion, "ce_specversion"},
		{"HeaderCEID", contract.HeaderCEID, "ce_id"},
		{"HeaderCEType", contract.HeaderCEType, "ce_type"},
		{"HeaderCESource", contract.HeaderCESource, "ce_source"},
		{"HeaderCETime", contract.HeaderCETime, "ce_time"},
		{"HeaderContentType", contract.HeaderContentType, "content-type"},
		{"CESpecVersion", contract.CESpecVersion, "1.0"},
		{"ContentTypeJSON", contract.ContentTypeJSON, "application/json"},
		{"AggregateOrder", contract.AggregateOrder, "order"},
		{"Topic", contract.Topic, "eventforge.orders"},
		{"Slot", contract.Slot, "eventforge_outbox"},
		{"Publication", contract.Publication, "eventforge_outbox"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q; the wire format and docs/events.md say %q", tt.name, tt.got, tt.want)
		}
	}
}
