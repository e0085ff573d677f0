package rpc

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// OpenAPI returns the REST gateway's OpenAPI v2 document
// (eventforgev1.OpenAPI, generated from the .proto files) with the
// protovalidate rules of every request field added as JSON Schema keywords,
// read from the same descriptors the server enforces them from: string
// min_len/max_len/len/pattern/uuid become minLength/maxLength/pattern/format,
// integer bounds minimum/maximum (and, for int64 fields, which JSON carries
// as strings, a pattern of the decimal range; in a body, where the gateway
// also takes a JSON number, the type ["string", "integer"]), repeated min_items/max_items
// minItems/maxItems, and required a "required" entry. Request bodies get
// additionalProperties: false, since unknown JSON fields are refused. CreateOrderRequest's
// currency gets the enum of Currencies(). request_id is described as the
// Idempotency-Key header only, the form REST clients use. A rule without an
// OpenAPI form is an error, so the document can never miss one.
//
// The document also says where the proto3 JSON mapping the gateway speaks
// is more lenient than the generated schema: an enum query parameter lists
// the numbers of its values beside their names (the gateway takes either);
// a body property that may be left unset is x-nullable, since JSON null
// means "unset" and its unset value passes the rules; and a body with no
// required property is optional (an empty body is an empty message).
func OpenAPI() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(eventforgev1.OpenAPI, &doc); err != nil {
		return nil, fmt.Errorf("decoding the generated OpenAPI document: %w", err)
	}
	e := enricher{doc: doc, defs: asMap(doc["definitions"]), done: map[string]bool{}}
	svc := eventforgev1.File_eventforge_v1_orders_proto.Services().ByName("OrderService")
	methods := svc.Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		op := e.operation(string(svc.Name()) + "_" + string(m.Name()))
		if op == nil {
			return nil, fmt.Errorf("the OpenAPI document has no operation for %s", m.FullName())
		}
		if err := e.operation1(op, m.Input()); err != nil {
			return nil, fmt.Errorf("%s: %w", m.FullName(), err)
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// restHeaders are request fields that REST clients send as a header: the
// header carries the field's rules, and the body schema omits the field.
var restHeaders = map[protoreflect.FullName]string{
	"eventforge.v1.CreateOrderRequest.request_id": IdempotencyKeyHeader,
}

// enums are fields whose accepted values come from a list rather than a
// field rule.
var enums = map[protoreflect.FullName]func() []string{
	"eventforge.v1.CreateOrderRequest.currency": Currencies,
}

type enricher struct {
	doc  map[string]any
	defs map[string]any
	done map[string]bool // definitions already enriched
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func (e *enricher) operation(id string) map[string]any {
	for _, path := range asMap(e.doc["paths"]) {
		for _, op := range asMap(path) {
			if o := asMap(op); o != nil && o["operationId"] == id {
				return o
			}
		}
	}
	return nil
}

// operation1 adds the rules of input's fields to the operation's parameters
// and body schema.
func (e *enricher) operation1(op map[string]any, input protoreflect.MessageDescriptor) error {
	params, _ := op["parameters"].([]any)
	headerFields := map[string]protoreflect.FieldDescriptor{}
	for name, header := range restHeaders {
		if fd := input.Fields().ByName(name.Name()); fd != nil && fd.FullName() == name {
			headerFields[header] = fd
		}
	}
	for _, p := range params {
		param := asMap(p)
		name, _ := param["name"].(string)
		switch param["in"] {
		case "path", "query":
			fd := input.Fields().ByName(protoreflect.Name(name))
			if fd == nil {
				return fmt.Errorf("parameter %q is no field of %s", name, input.FullName())
			}
			if err := e.field(param, fd); err != nil {
				return err
			}
		case "header":
			fd, ok := headerFields[name]
			if !ok {
				continue // not a request field (e.g. documented only)
			}
			if err := e.field(param, fd); err != nil {
				return err
			}
			// A header that is sent must not be empty.
			if n, ok := param["minLength"].(uint64); !ok || n < 1 {
				param["minLength"] = uint64(1)
			}
		case "body":
			schema := asMap(param["schema"])
			if err := e.message(schema, input); err != nil {
				return err
			}
			// An absent body is an empty message, so it is refused only
			// when the message has a required field.
			req, _ := e.resolve(schema)["required"].([]any)
			param["required"] = len(req) > 0
		}
	}
	return nil
}

// resolve returns the object schema schema refers to ($ref), or schema.
func (e *enricher) resolve(schema map[string]any) map[string]any {
	if ref, ok := schema["$ref"].(string); ok {
		return asMap(e.defs[strings.TrimPrefix(ref, "#/definitions/")])
	}
	return schema
}

// message adds the rules of md's fields to schema, an object schema or a
// $ref to one.
func (e *enricher) message(schema map[string]any, md protoreflect.MessageDescriptor) error {
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/definitions/")
		if e.done[name] {
			return nil
		}
		e.done[name] = true
		schema = asMap(e.defs[name])
		if schema == nil {
			return fmt.Errorf("definition %s is missing", name)
		}
	}
	// The gateway refuses unknown JSON fields (RESTMarshaler).
	schema["additionalProperties"] = false
	// The fields whose unset value breaks a rule: JSON null (unset) is
	// refused for them, accepted for the others.
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return fmt.Errorf("finding the Go type of %s: %w", md.FullName(), err)
	}
	unset, err := checkRules(mt.New().Interface())
	if err != nil {
		return err
	}
	props := asMap(schema["properties"])
	for name, p := range props {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return fmt.Errorf("property %q is no field of %s", name, md.FullName())
		}
		if _, ok := restHeaders[fd.FullName()]; ok {
			delete(props, name)
			continue
		}
		prop := asMap(p)
		required, err := e.rules(prop, fd)
		if err != nil {
			return err
		}
		if required {
			req, _ := schema["required"].([]any)
			schema["required"] = append(req, name)
		} else if !fieldViolated(unset, name) {
			prop["x-nullable"] = true
		}
		if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
			target := prop
			if fd.IsList() {
				target = asMap(prop["items"])
			}
			if err := e.message(target, fd.Message()); err != nil {
				return err
			}
		}
	}
	return nil
}

// field adds fd's rules to a non-body parameter.
func (e *enricher) field(param map[string]any, fd protoreflect.FieldDescriptor) error {
	required, err := e.rules(param, fd)
	if required {
		param["required"] = true
	}
	return err
}

// fieldRules returns the protovalidate rules declared on fd (nil if none).
func fieldRules(fd protoreflect.FieldDescriptor) *validate.FieldRules {
	r, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	return r
}

// rules adds the keywords of fd's rules to schema and reports whether the
// field is required.
func (e *enricher) rules(schema map[string]any, fd protoreflect.FieldDescriptor) (required bool, err error) {
	if list, ok := enums[fd.FullName()]; ok {
		values := list()
		enum := make([]any, len(values))
		for i, v := range values {
			enum[i] = v
		}
		schema["enum"] = enum
	}
	r := fieldRules(fd)
	if r == nil {
		return false, nil
	}
	r.ProtoReflect().Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch f.Name() {
		case "required":
			required = v.Bool()
		case "string":
			err = stringRules(schema, v.Message())
		case "int32", "int64":
			err = intRules(schema, v.Message(), f.Name() == "int64")
		case "enum":
			err = enumRules(schema, fd, v.Message())
		case "repeated":
			err = repeatedRules(schema, v.Message())
		default:
			err = fmt.Errorf("%s: rule %s has no OpenAPI form", fd.FullName(), f.Name())
		}
		return err == nil
	})
	return required, err
}

func stringRules(schema map[string]any, m protoreflect.Message) (err error) {
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch f.Name() {
		case "min_len":
			schema["minLength"] = v.Uint()
		case "max_len":
			schema["maxLength"] = v.Uint()
		case "len":
			schema["minLength"], schema["maxLength"] = v.Uint(), v.Uint()
		case "pattern":
			schema["pattern"] = v.String()
		case "uuid":
			if v.Bool() {
				schema["format"] = "uuid"
				schema["pattern"] = uuidPattern
			}
		default:
			err = fmt.Errorf("string rule %s has no OpenAPI form", f.Name())
		}
		return err == nil
	})
	return err
}

// uuidPattern is the form protovalidate's string.uuid rule accepts.
const uuidPattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

func intRules(schema map[string]any, m protoreflect.Message, jsonString bool) (err error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch f.Name() {
		case "gte":
			lo = v.Int()
			schema["minimum"] = v.Int()
		case "lte":
			hi = v.Int()
			schema["maximum"] = v.Int()
		case "gt":
			lo = v.Int() + 1
			schema["minimum"], schema["exclusiveMinimum"] = v.Int(), true
		case "lt":
			hi = v.Int() - 1
			schema["maximum"], schema["exclusiveMaximum"] = v.Int(), true
		default:
			err = fmt.Errorf("integer rule %s has no OpenAPI form", f.Name())
		}
		return err == nil
	})
	if err == nil && jsonString {
		// JSON carries int64 as a string, which minimum and maximum do not
		// constrain: a pattern spells the same range in decimal.
		if lo < 0 {
			return fmt.Errorf("int64 range [%d, %d] has no pattern form (negative bound)", lo, hi)
		}
		schema["pattern"] = rangePattern(uint64(lo), uint64(hi))
		if _, param := schema["in"].(string); !param {
			// proto3 JSON also reads a number (RESTMarshaler: one without
			// fraction or exponent), which minimum and maximum bound.
			schema["type"] = []any{"string", "integer"}
		}
	}
	return err
}

// enumRules lists the defined values of an enum parameter: their names,
// then their numbers, since the gateway reads a query parameter as either
// ("ORDER_STATUS_CREATED" or "1"). In a JSON body the number would be a
// JSON number, which a string schema cannot describe: no request body holds
// an enum, and one there is an error until it has a form.
func enumRules(schema map[string]any, fd protoreflect.FieldDescriptor, m protoreflect.Message) (err error) {
	if _, param := schema["in"].(string); !param {
		return fmt.Errorf("%s: an enum in a request body has no OpenAPI form (JSON takes its name or number)", fd.FullName())
	}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch f.Name() {
		case "defined_only":
			values := fd.Enum().Values()
			enum := make([]any, 0, 2*values.Len())
			for i := range values.Len() {
				enum = append(enum, string(values.Get(i).Name()))
			}
			for i := range values.Len() {
				enum = append(enum, strconv.Itoa(int(values.Get(i).Number())))
			}
			schema["enum"] = enum
		default:
			err = fmt.Errorf("enum rule %s has no OpenAPI form", f.Name())
		}
		return err == nil
	})
	return err
}

func repeatedRules(schema map[string]any, m protoreflect.Message) (err error) {
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch f.Name() {
		case "min_items":
			schema["minItems"] = v.Uint()
		case "max_items":
			schema["maxItems"] = v.Uint()
		default:
			err = fmt.Errorf("repeated rule %s has no OpenAPI form", f.Name())
		}
		return err == nil
	})
	return err
}

// rangePattern returns a regular expression that matches exactly the
// decimal numbers from lo to hi (no sign, no leading zeros).
func rangePattern(lo, hi uint64) string {
	var parts []string
	// Split by number of digits, so each piece has a fixed length.
	for digits, floor := 1, uint64(0); lo <= hi && digits <= 20; digits++ {
		ceil := uint64(math.MaxUint64)
		if digits < 20 {
			ceil = pow10(digits) - 1
		}
		if lo <= ceil {
			parts = append(parts, samePattern(max(lo, floor), min(hi, ceil), digits)...)
		}
		floor = ceil + 1
		if ceil >= hi {
			break
		}
	}
	return "^(" + strings.Join(parts, "|") + ")$"
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// samePattern covers lo..hi, numbers of digits digits, with pieces of the
// form prefix [a-b] [0-9]{k}.
func samePattern(lo, hi uint64, digits int) []string {
	var parts []string
	for lo <= hi {
		// The largest aligned block lo..lo+step-1 within hi.
		step, k := uint64(1), 0
		for k < digits-1 && lo%(step*10) == 0 && lo+step*10-1 <= hi {
			step *= 10
			k++
		}
		first := (lo / step) % 10
		n := uint64(1)
		for first+n <= 9 && lo+(n+1)*step-1 <= hi {
			n++
		}
		prefix := ""
		if lo/step >= 10 {
			prefix = strconv.FormatUint(lo/step/10, 10)
		}
		piece := prefix
		if n == 1 {
			piece += strconv.FormatUint(first, 10)
		} else {
			piece += fmt.Sprintf("[%d-%d]", first, first+n-1)
		}
		if k > 0 {
			piece += fmt.Sprintf("[0-9]{%d}", k)
		}
		parts = append(parts, piece)
		next := lo + n*step
		if next < lo { // wrapped past MaxUint64
			break
		}
		lo = next
	}
	return parts
}
