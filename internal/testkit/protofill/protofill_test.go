package protofill

import (
	"math/rand/v2"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// unset lists the fields of m, and of the messages in it, that Fill left
// unset: a field outside a oneof that is not set, or a oneof with none of
// its fields set. A Timestamp or Duration is one value (whole seconds have
// no nanos).
func unset(m protoreflect.Message) []string {
	if name := m.Descriptor().FullName(); name == "google.protobuf.Timestamp" || name == "google.protobuf.Duration" {
		return nil
	}
	var out []string
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if oneof := fd.ContainingOneof(); oneof != nil && !oneof.IsSynthetic() {
			continue
		}
		if !m.Has(fd) {
			out = append(out, string(fd.FullName()))
		}
	}
	oneofs := m.Descriptor().Oneofs()
	for i := range oneofs.Len() {
		if oneof := oneofs.Get(i); !oneof.IsSynthetic() && m.WhichOneof(oneof) == nil {
			out = append(out, string(oneof.FullName()))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				out = append(out, unset(v.List().Get(i).Message())...)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				out = append(out, unset(v.Message())...)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			out = append(out, unset(v.Message())...)
		}
		return true
	})
	return out
}

// Every field of every message EventForge defines, of the well-known types
// protojson writes in forms of their own, and of messages with every scalar
// kind, proto2 presence and oneofs, is set after Fill; protojson writes the
// result and reads it back as the same message.
func TestFillSetsEveryField(t *testing.T) {
	var messages []protoreflect.MessageType
	for _, fd := range []protoreflect.FileDescriptor{eventforgev1.File_eventforge_v1_events_proto, eventforgev1.File_eventforge_v1_orders_proto} {
		for i := range fd.Messages().Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(fd.Messages().Get(i).FullName())
			if err != nil {
				t.Fatal(err)
			}
			messages = append(messages, mt)
		}
	}
	for _, m := range []proto.Message{&durationpb.Duration{}, &wrapperspb.UInt64Value{}, &wrapperspb.BytesValue{},
		&descriptorpb.UninterpretedOption{}, &descriptorpb.FieldOptions{}, &validate.Int64Rules{}, &validate.StringRules{}} {
		messages = append(messages, m.ProtoReflect().Type())
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, mt := range messages {
		t.Run(string(mt.Descriptor().FullName()), func(t *testing.T) {
			for range 200 {
				m := mt.New().Interface()
				if err := Fill(r, m); err != nil {
					t.Fatal(err)
				}
				if missing := unset(m.ProtoReflect()); len(missing) > 0 {
					t.Fatalf("Fill left %v unset: %v", missing, m)
				}
				b, err := protojson.Marshal(m)
				if err != nil {
					t.Fatalf("protojson refuses %v: %v", m, err)
				}
				back := mt.New().Interface()
				if err := protojson.Unmarshal(b, back); err != nil || !proto.Equal(back, m) {
					t.Fatalf("protojson reads %s back as %v (%v), want %v", b, back, err, m)
				}
			}
		})
	}
}

// A recursive message ends at MaxDepth; a type whose values are not
// arbitrary is refused.
func TestFillBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	if err := Fill(r, &descriptorpb.DescriptorProto{}); err != nil {
		t.Fatal(err)
	}
	if err := Fill(r, &anypb.Any{}); err == nil {
		t.Error("Fill filled a google.protobuf.Any")
	}
}

// Options.Alphabet is what strings are made of.
func TestFillAlphabet(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 100 {
		var m eventforgev1.OrderCancelled
		if err := (Options{Alphabet: []string{"x"}}).Fill(r, &m); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{m.GetOrderId(), m.GetCustomerId(), m.GetReason()} {
			if n := len(s); n == 0 || n > 8 || s != strings.Repeat("x", n) {
				t.Fatalf("string %q is not 1 to 8 pieces of the alphabet", s)
			}
		}
	}
}
