package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// Unmarshal reads a request body. A refusal is a *BodyError, whose text
// names what is wrong in the document's terms, never a parser's.
func (m strictJSON) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return m.JSONPb.Unmarshal(data, v)
	}
	md := msg.ProtoReflect().Descriptor()
	// The error text becomes the answer's message, which must be UTF-8
	// (else the gateway fails to encode the answer and sends a 500): say
	// what is wrong without echoing what is not UTF-8.
	switch {
	case !utf8.Valid(data):
		return &BodyError{Description: "the request body is not UTF-8"}
	case bytes.HasPrefix(data, []byte("\uFEFF")):
		return &BodyError{Description: "the request body starts with a byte order mark (U+FEFF); send the JSON without one"}
	case tooDeep(data):
		return &BodyError{Description: fmt.Sprintf("the request body nests more than %d levels deep", maxJSONDepth)}
	case !json.Valid(data):
		return &BodyError{Description: "the request body is not a JSON value"}
	}
	if err := checkJSONForm(data, md); err != nil {
		return err
	}
	// protojson itself, unlike JSONPb, also refuses data after the value.
	// What checkJSONForm let through and protojson refuses is a form it
	// does not know: say so without protojson's words.
	if err := m.UnmarshalOptions.Unmarshal(data, msg); err != nil {
		return &BodyError{Description: "the request body does not match " + string(md.Name()) + " in /openapi.json", err: err}
	}
	return nil
}

// BodyError is why a REST request body was refused: Field, when one is at
// fault, in the form of protovalidate's field paths (items[0].quantity).
type BodyError struct {
	Field, Description string
	err                error
}

func (e *BodyError) Error() string {
	if e.Field == "" {
		return e.Description
	}
	return "field " + strconv.Quote(e.Field) + " " + e.Description
}

func (e *BodyError) Unwrap() error { return e.err }

// Status is the INVALID_ARGUMENT answer to the refusal: with a field
// violation when a field is at fault.
func (e *BodyError) Status() *status.Status {
	if e.Field == "" {
		return status.New(codes.InvalidArgument, "invalid request: "+e.Description)
	}
	return status.Convert(invalidArgument([]*errdetails.BadRequest_FieldViolation{violation(e.Field, e.Description)}))
}

// RequestBody is a REST request body read whole before the gateway decodes
// it. The gateway keeps only the text of a decoding error; the decoder
// (RESTMarshaler) records the refusal in the body too, for the gateway's
// error handler to answer with its field violation (BodyFault).
type RequestBody struct {
	data  []byte
	r     bytes.Reader
	fault *BodyError
}

// NewRequestBody returns data as a request body.
func NewRequestBody(data []byte) *RequestBody {
	b := &RequestBody{data: data}
	b.r.Reset(data)
	return b
}

func (b *RequestBody) Read(p []byte) (int, error) { return b.r.Read(p) }

// Close does nothing: the body is in memory.
func (b *RequestBody) Close() error { return nil }

// BodyFault returns the status of the refusal the decoder recorded in body
// (a *RequestBody), or nil.
func BodyFault(body io.Reader) *status.Status {
	if b, ok := body.(*RequestBody); ok && b.fault != nil {
		return b.fault.Status()
	}
	return nil
}

// NewDecoder reads the whole body (the HTTP server has already bounded
// it); an empty body is io.EOF, which the gateway reads as an empty
// message. A body of white space is not empty: it is no JSON value.
func (m strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		var data []byte
		rb, buffered := r.(*RequestBody)
		if buffered {
			data = rb.data
		} else {
			var err error
			if data, err = io.ReadAll(r); err != nil {
				return fmt.Errorf("reading the request body: %w", err)
			}
		}
		if len(data) == 0 {
			return io.EOF
		}
		err := m.Unmarshal(data, v)
		var be *BodyError
		if buffered && errors.As(err, &be) {
			rb.fault = be
		}
		return err
	})
}

// maxJSONDepth bounds how deeply a request body may nest arrays and
// objects; the deepest request the document describes nests three levels
// (an order's items' fields).
const maxJSONDepth = 16

// tooDeep reports whether data nests arrays and objects more than
// maxJSONDepth levels deep (brackets within strings do not count).
func tooDeep(data []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// decimalInteger is the form of an integer in the document: no sign for
// zero, no leading zeros, no fraction or exponent.
var decimalInteger = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

// checkJSONForm refuses a body (valid JSON) whose fields are named, given
// or typed other than the document says: a body that is not an object, a
// field that is unknown, given twice or bound from the URL path, a value
// of the wrong JSON type or out of its integer's range, a null inside a
// list. What it does not look at (well-known types, maps, bytes) is left to
// protojson.
func checkJSONForm(data []byte, md protoreflect.MessageDescriptor) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return &BodyError{Description: "the request body is not a JSON value"}
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &BodyError{Description: "the request body is not a JSON object"}
	}
	return checkObject(dec, md, "", pathFields()[md.FullName()])
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

// checkObject checks the members of an object of message md whose '{' was
// read, up to and including its '}'. path prefixes the field names;
// fromPath are fields the route binds from the URL path.
func checkObject(dec *json.Decoder, md protoreflect.MessageDescriptor, path string, fromPath map[string]bool) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return &BodyError{Description: "the request body is not a JSON value"}
		}
		key, _ := tok.(string)
		name := path + key
		fd := md.Fields().ByName(protoreflect.Name(key))
		switch {
		case seen[key]:
			return &BodyError{Field: name, Description: "is given more than once"}
		case fromPath[key]:
			return &BodyError{Field: name, Description: "comes from the URL path, not the body"}
		case fd == nil || string(fd.Name()) != key:
			return &BodyError{Field: name, Description: "is not a field of " + string(md.Name())}
		}
		seen[key] = true
		if err := checkField(dec, fd, name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// checkField checks the value of field fd (a list, a map or a single value).
func checkField(dec *json.Decoder, fd protoreflect.FieldDescriptor, name string) error {
	switch {
	case fd.IsMap():
		return skipValue(dec)
	case fd.IsList():
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok == nil {
			return nil // null: unset
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return &BodyError{Field: name, Description: "must be a JSON array"}
		}
		for i := 0; dec.More(); i++ {
			el := fmt.Sprintf("%s[%d]", name, i)
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			if tok == nil {
				return &BodyError{Field: el, Description: "must not be null"}
			}
			if err := checkValue(dec, tok, fd, el); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err // null: unset
	}
	return checkValue(dec, tok, fd, name)
}

// checkValue checks one value of field fd whose first token is tok.
func checkValue(dec *json.Decoder, tok json.Token, fd protoreflect.FieldDescriptor, name string) error {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		if strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			return skipRest(dec, tok) // well-known types have JSON forms of their own
		}
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			return &BodyError{Field: name, Description: "must be a JSON object"}
		}
		return checkObject(dec, fd.Message(), name+".", nil)
	}
	if _, ok := tok.(json.Delim); ok {
		return &BodyError{Field: name, Description: "must be " + scalarForm(fd)}
	}
	return checkScalar(tok, fd, name)
}

// scalarForm is the JSON form of a scalar field, as the document gives it.
func scalarForm(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a JSON string"
	case protoreflect.BytesKind:
		return "a JSON string of base64"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.EnumKind:
		return "the name or the number of a value of " + string(fd.Enum().Name())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "a 32-bit integer: a JSON number without fraction or exponent"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "an unsigned 32-bit integer: a JSON number without fraction or exponent"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return "a 64-bit integer: a string of decimal digits or a JSON number without fraction or exponent"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "an unsigned 64-bit integer: a string of decimal digits or a JSON number without fraction or exponent"
	}
	return "a JSON number"
}

// checkScalar checks a string, number or boolean token against field fd.
func checkScalar(tok json.Token, fd protoreflect.FieldDescriptor, name string) error {
	wrong := &BodyError{Field: name, Description: "must be " + scalarForm(fd)}
	str, isString := tok.(string)
	num, isNumber := tok.(json.Number)
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		if !isString {
			return wrong
		}
	case protoreflect.BoolKind:
		if _, ok := tok.(bool); !ok {
			return wrong
		}
	case protoreflect.EnumKind:
		switch {
		case isString && fd.Enum().Values().ByName(protoreflect.Name(str)) != nil:
		case isNumber && decimalInteger.MatchString(string(num)):
			if _, err := strconv.ParseInt(string(num), 10, 32); err != nil {
				return wrong
			}
		default:
			return wrong
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if !isNumber || !decimalInteger.MatchString(string(num)) {
			return wrong
		}
		if desc := rangeFault(string(num), fd); desc != "" {
			return &BodyError{Field: name, Description: desc}
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		text := str
		if isNumber {
			text = string(num)
		} else if !isString {
			return wrong
		}
		if !decimalInteger.MatchString(text) {
			return wrong
		}
		if desc := rangeFault(text, fd); desc != "" {
			return &BodyError{Field: name, Description: desc}
		}
	default: // float, double
		special := isString && (str == "NaN" || str == "Infinity" || str == "-Infinity")
		if !isNumber && !special {
			return wrong
		}
	}
	return nil
}

// rangeFault says how a decimal integer is outside the range of fd's type
// ("" when it is within it).
func rangeFault(text string, fd protoreflect.FieldDescriptor) string {
	bits, unsigned := 64, false
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		bits = 32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		bits, unsigned = 32, true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		unsigned = true
	}
	var err error
	if unsigned {
		_, err = strconv.ParseUint(text, 10, bits)
	} else {
		_, err = strconv.ParseInt(text, 10, bits)
	}
	if err != nil {
		kind := "a"
		if unsigned {
			kind = "an unsigned"
		}
		return fmt.Sprintf("is out of range for %s %d-bit integer", kind, bits)
	}
	return ""
}

// skipValue reads one whole value.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return skipRest(dec, tok)
}

// skipRest reads the rest of a value whose first token was tok.
func skipRest(dec *json.Decoder, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}
