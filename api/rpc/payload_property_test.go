package rpc

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/eventforge/eventforge/internal/testkit/protofill"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// encoders are the event messages the api writes to outbox.payload with an
// encoder of its own instead of payloadJSON (protojson).
var encoders = map[protoreflect.FullName]func(proto.Message) ([]byte, error){
	"eventforge.v1.OrderCreated": func(m proto.Message) ([]byte, error) {
		return appendOrderCreated(nil, m.(*eventforgev1.OrderCreated))
	},
}

// TestPayloadEncodersWriteEveryField: each event message with an encoder of
// its own, with every field set to random values (protofill), nested
// messages and repeated fields included, is written as protojson writes it.
// A field the encoder leaves out (one added to events.proto, say) fails.
func TestPayloadEncodersWriteEveryField(t *testing.T) {
	events := eventforgev1.File_eventforge_v1_events_proto.Messages()
	for name := range encoders {
		if events.ByName(name.Name()) == nil {
			t.Errorf("%s has an encoder but is no message of events.proto", name)
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for i := range events.Len() {
		name := events.Get(i).FullName()
		encode, ok := encoders[name]
		if !ok {
			continue // written by payloadJSON itself
		}
		t.Run(string(name), func(t *testing.T) {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
			if err != nil {
				t.Fatal(err)
			}
			for range 2000 {
				m := mt.New().Interface()
				if err := protofill.Fill(r, m); err != nil {
					t.Fatal(err)
				}
				checkEncoderIsProtojson(t, encode, m)
			}
		})
	}
}
