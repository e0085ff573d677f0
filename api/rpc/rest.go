package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// RESTMarshaler is the JSON mapping of the REST gateway: proto field names
// (snake_case), every field emitted, and unknown request fields refused
// (protojson's default), so a misspelt field is an error and not a silently
// empty value.
//
// Request bodies are read only in the forms /openapi.json describes, which
// are narrower than the proto3 JSON mapping: a 64-bit integer is a JSON
// string of decimal digits or a JSON number without fraction or exponent
// ("1999" or 1999, not "1e3" or 1999.0; the document's type is
// ["string", "integer"]), a 32-bit integer only such a JSON number (2, not
// "2" or 2.0), and a field is named only by its proto name (customer_id,
// not customerId). A field the route
// takes from the URL path (CancelOrder's order_id) is refused in the body,
// whose schema does not hold it.
func RESTMarshaler() runtime.Marshaler {
	return &runtime.HTTPBodyMarshaler{Marshaler: strictJSON{&runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{},
	}}}
}

// strictJSON is runtime.JSONPb with request bodies checked against the
// document's form before protojson reads them.
type strictJSON struct{ *runtime.JSONPb }

func (m strictJSON) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return m.JSONPb.Unmarshal(data, v)
	}
	// The error text becomes the answer's message, which must be UTF-8
	// (else the gateway fails to encode the answer and sends a 500): say
	// what is wrong without echoing what is not UTF-8.
	switch {
	case !utf8.Valid(data):
		return errors.New("the request body is not UTF-8")
	case !json.Valid(data):
		return errors.New("the request body is not a JSON value")
	}
	if err := checkJSONForm(data, msg.ProtoReflect().Descriptor()); err != nil {
		return err
	}
	// protojson itself, unlike JSONPb, also refuses data after the value.
	if err := m.UnmarshalOptions.Unmarshal(data, msg); err != nil {
		return utf8Error{err}
	}
	return nil
}

// utf8Error is err with its text made valid UTF-8.
type utf8Error struct{ err error }

func (e utf8Error) Error() string { return strings.ToValidUTF8(e.err.Error(), "\uFFFD") }

func (e utf8Error) Unwrap() error { return e.err }

// NewDecoder reads the whole body (the HTTP server has already bounded
// it); an empty body is io.EOF, which the gateway reads as an empty
// message. A body of white space is not empty: it is no JSON value.
func (m strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("reading the request body: %w", err)
		}
		if len(data) == 0 {
			return io.EOF
		}
		return m.Unmarshal(data, v)
	})
}

// decimalInteger is the form of an integer in the document: no sign for
// zero, no leading zeros, no fraction or exponent.
var decimalInteger = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

// checkJSONForm refuses a body whose fields are named or typed other than
// the document says. What it does not look at (malformed JSON, a string
// where an object belongs, null) is left to protojson, which refuses or
// reads it as the document says.
func checkJSONForm(data []byte, md protoreflect.MessageDescriptor) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // protojson reports it
	}
	if obj, ok := v.(map[string]any); ok {
		for key := range obj {
			if pathFields()[md.FullName()][key] {
				return fmt.Errorf("field %q comes from the URL path, not the body", key)
			}
		}
	}
	return checkMessageForm(v, md, "")
}

// pathFields are, per request message, the fields its route binds from the
// URL path, read from the generated OpenAPI document's path parameters.
var pathFields = sync.OnceValue(func() map[protoreflect.FullName]map[string]bool {
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Parameters  []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	out := map[protoreflect.FullName]map[string]bool{}
	if err := json.Unmarshal(eventforgev1.OpenAPI, &doc); err != nil {
		return out // OpenAPI, which every start builds, reports it
	}
	svc := eventforgev1.File_eventforge_v1_orders_proto.Services().ByName("OrderService")
	for _, ops := range doc.Paths {
		for _, op := range ops {
			m := svc.Methods().ByName(protoreflect.Name(strings.TrimPrefix(op.OperationID, string(svc.Name())+"_")))
			if m == nil {
				continue
			}
			for _, p := range op.Parameters {
				if p.In != "path" {
					continue
				}
				if out[m.Input().FullName()] == nil {
					out[m.Input().FullName()] = map[string]bool{}
				}
				out[m.Input().FullName()][p.Name] = true
			}
		}
	}
	return out
})

func checkMessageForm(v any, md protoreflect.MessageDescriptor, path string) error {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil
	}
	for key, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(key))
		name := path + key
		if fd == nil {
			return fmt.Errorf("unknown field %q", name)
		}
		switch {
		case val == nil, fd.IsMap():
		case fd.IsList():
			list, _ := val.([]any)
			for i, el := range list {
				if err := checkValueForm(el, fd, fmt.Sprintf("%s[%d]", name, i)); err != nil {
					return err
				}
			}
		default:
			if err := checkValueForm(val, fd, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkValueForm(v any, fd protoreflect.FieldDescriptor, name string) error {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		var text string
		switch v := v.(type) {
		case string:
			text = v
		case json.Number:
			text = string(v)
		}
		if !decimalInteger.MatchString(text) {
			return fmt.Errorf("field %q: a 64-bit integer is a string of decimal digits or a JSON number without fraction or exponent", name)
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, ok := v.(json.Number); !ok || !decimalInteger.MatchString(string(n)) {
			return fmt.Errorf("field %q: a 32-bit integer is a JSON number without fraction or exponent", name)
		}
	case protoreflect.MessageKind:
		return checkMessageForm(v, fd.Message(), name+".")
	}
	return nil
}
