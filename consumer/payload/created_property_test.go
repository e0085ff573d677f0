package payload

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/eventforge/eventforge/internal/testkit/protofill"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// decoders are the event messages consumers read with a decoder of their
// own before protojson: it reports false for what it leaves to protojson.
var decoders = map[protoreflect.FullName]func([]byte) (proto.Message, bool){
	"eventforge.v1.OrderCreated": func(b []byte) (proto.Message, bool) { return decodeCreated(b) },
}

// plainText is what the strings of the api's events are made of, with
// nothing JSON escapes: the decoder hands an escape to protojson, which
// the mutation and fuzz tests cover.
var plainText = []string{"a", "Z", "0", "9", "-", "_", ".", " ", "/", "<", "&", "'", "é", "日", "😀"}

// TestPayloadDecodersReadEveryField: each event message with a decoder of
// its own, with every field set to random values (protofill), written as
// protojson writes it and as PostgreSQL's jsonb gives it back, is read by
// the decoder (not handed to protojson) as the message protojson reads. A
// field the decoder does not know (one added to events.proto, say) fails.
func TestPayloadDecodersReadEveryField(t *testing.T) {
	events := eventforgev1.File_eventforge_v1_events_proto.Messages()
	for name := range decoders {
		if events.ByName(name.Name()) == nil {
			t.Errorf("%s has a decoder but is no message of events.proto", name)
		}
	}
	r := rand.New(rand.NewPCG(13, 14))
	fill := protofill.Options{Alphabet: plainText}
	for i := range events.Len() {
		name := events.Get(i).FullName()
		decode, ok := decoders[name]
		if !ok {
			continue // read by protojson itself
		}
		t.Run(string(name), func(t *testing.T) {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
			if err != nil {
				t.Fatal(err)
			}
			for range 2000 {
				m := mt.New().Interface()
				if err := fill.Fill(r, m); err != nil {
					t.Fatal(err)
				}
				written, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				for _, data := range [][]byte{written, jsonbText(t, written)} {
					got, ok := decode(data)
					if !ok {
						t.Fatalf("the decoder hands %s to protojson", data)
					}
					want := mt.New().Interface()
					if err := unmarshal.Unmarshal(data, want); err != nil {
						t.Fatal(err)
					}
					if !proto.Equal(got, want) || !proto.Equal(got, m) {
						t.Fatalf("the decoder reads %s as %v; protojson reads %v, the message was %v", data, got, want, m)
					}
				}
			}
		})
	}
}

// jsonbText rewrites the JSON data as PostgreSQL's jsonb type prints it:
// object keys shortest first, then in byte order, ", " and ": " between
// members, numbers as written.
func jsonbText(t *testing.T, data []byte) []byte {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeJSONB(t, &out, v)
	return out.Bytes()
}

func writeJSONB(t *testing.T, out *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if len(a) != len(b) {
				return len(a) - len(b)
			}
			return strings.Compare(a, b)
		})
		out.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				out.WriteString(", ")
			}
			writeJSONB(t, out, k)
			out.WriteString(": ")
			writeJSONB(t, out, v[k])
		}
		out.WriteByte('}')
	case []any:
		out.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				out.WriteString(", ")
			}
			writeJSONB(t, out, e)
		}
		out.WriteByte(']')
	case json.Number:
		out.WriteString(v.String())
	default:
		e := json.NewEncoder(out)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		out.Truncate(out.Len() - 1) // Encode's newline
	}
}
