package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// docLocation finds the schema (a parameter, or a property of the body
// schema) that describes field fd of method's request, and the object schema
// holding it ("" for a parameter).
type docLocation struct {
	schema map[string]any
	parent map[string]any // the object schema, nil for a parameter
	name   string
}

func locate(t *testing.T, doc map[string]any, method protoreflect.MethodDescriptor, path []protoreflect.FieldDescriptor) (docLocation, bool) {
	t.Helper()
	var op map[string]any
	for _, p := range asMap(doc["paths"]) {
		for _, o := range asMap(p) {
			if asMap(o)["operationId"] == "OrderService_"+string(method.Name()) {
				op = asMap(o)
			}
		}
	}
	if op == nil {
		t.Fatalf("no operation for %s", method.FullName())
	}
	defs := asMap(doc["definitions"])
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			return asMap(defs[strings.TrimPrefix(ref, "#/definitions/")])
		}
		return s
	}
	params, _ := op["parameters"].([]any)
	top := path[0]
	for _, p := range params {
		param := asMap(p)
		switch {
		case param["in"] == "header" && restHeaders[top.FullName()] == param["name"]:
			return docLocation{schema: param, name: param["name"].(string)}, true
		case (param["in"] == "path" || param["in"] == "query") && param["name"] == string(top.Name()):
			return docLocation{schema: param, name: param["name"].(string)}, true
		}
	}
	for _, p := range params {
		param := asMap(p)
		if param["in"] != "body" {
			continue
		}
		obj := resolve(asMap(param["schema"]))
		for i, fd := range path {
			prop := asMap(asMap(obj["properties"])[string(fd.Name())])
			if prop == nil {
				return docLocation{}, false
			}
			if obj["additionalProperties"] != false {
				t.Errorf("%s: body schema allows additional properties, which the gateway refuses", method.Name())
			}
			if i == len(path)-1 {
				return docLocation{schema: prop, parent: obj, name: string(fd.Name())}, true
			}
			if fd.IsList() {
				prop = asMap(prop["items"])
			}
			obj = resolve(prop)
		}
	}
	return docLocation{}, false
}

// eachRule calls f for every rule set on the fields of md (and of the
// messages it holds), with the field path and the rule's dotted name
// (e.g. "string.max_len").
func eachRule(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, f func(path []protoreflect.FieldDescriptor, rule string, v protoreflect.Value)) {
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := append(slices.Clone(path), fd)
		if r := fieldRules(fd); r != nil {
			r.ProtoReflect().Range(func(kind protoreflect.FieldDescriptor, v protoreflect.Value) bool {
				if kind.Kind() != protoreflect.MessageKind {
					f(p, string(kind.Name()), v)
					return true
				}
				v.Message().Range(func(rule protoreflect.FieldDescriptor, rv protoreflect.Value) bool {
					f(p, string(kind.Name())+"."+string(rule.Name()), rv)
					return true
				})
				return true
			})
		}
		if fd.Kind() == protoreflect.MessageKind && fd.Message().ParentFile() == md.ParentFile() {
			eachRule(fd.Message(), p, f)
		}
	}
}

// TestOpenAPICarriesEveryRule walks the descriptors of every request the
// service accepts and checks that each protovalidate rule the server
// enforces appears in the served document with its value.
func TestOpenAPICarriesEveryRule(t *testing.T) {
	raw, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	num := func(v any) string { return fmt.Sprint(v) }
	svc := eventforgev1.File_eventforge_v1_orders_proto.Services().ByName("OrderService")
	rules := 0
	for i := range svc.Methods().Len() {
		m := svc.Methods().Get(i)
		eachRule(m.Input(), nil, func(path []protoreflect.FieldDescriptor, rule string, v protoreflect.Value) {
			rules++
			name := fmt.Sprintf("%s %s %s", m.Name(), path[len(path)-1].FullName(), rule)
			loc, ok := locate(t, doc, m, path)
			if !ok {
				t.Errorf("%s: field not in the document", name)
				return
			}
			s := loc.schema
			want := func(keyword string, value any) {
				if got, ok := s[keyword]; !ok || num(got) != num(value) {
					t.Errorf("%s: %s is %v, want %v", name, keyword, got, value)
				}
			}
			switch rule {
			case "required":
				if loc.parent == nil {
					want("required", true)
				} else if req, _ := loc.parent["required"].([]any); !slices.Contains(req, any(loc.name)) {
					t.Errorf("%s: %s not in required %v", name, loc.name, req)
				}
			case "string.min_len":
				want("minLength", v.Uint())
			case "string.max_len":
				want("maxLength", v.Uint())
			case "string.len":
				want("minLength", v.Uint())
				want("maxLength", v.Uint())
			case "string.pattern":
				want("pattern", v.String())
			case "string.uuid":
				want("format", "uuid")
				want("pattern", uuidPattern)
			case "int32.gte", "int64.gte":
				want("minimum", v.Int())
			case "int32.lte", "int64.lte":
				want("maximum", v.Int())
			case "enum.defined_only":
				// Names, then numbers: the gateway reads either.
				values := path[len(path)-1].Enum().Values()
				var enum []any
				for j := range values.Len() {
					enum = append(enum, string(values.Get(j).Name()))
				}
				for j := range values.Len() {
					enum = append(enum, strconv.Itoa(int(values.Get(j).Number())))
				}
				want("enum", enum)
			case "repeated.min_items":
				want("minItems", v.Uint())
			case "repeated.max_items":
				want("maxItems", v.Uint())
			default:
				t.Errorf("%s: the test has no check for this rule", name)
			}
			if strings.HasPrefix(rule, "int64.") {
				if _, ok := s["pattern"]; !ok {
					t.Errorf("%s: int64 (a JSON string) without a range pattern", name)
				}
			}
		})
	}
	if rules < 20 {
		t.Fatalf("only %d rules found in the descriptors", rules)
	}
	if _, ok := asMap(asMap(asMap(doc["definitions"])["v1CreateOrderRequest"])["properties"])["request_id"]; ok {
		t.Error("the REST body still describes request_id; REST sends the Idempotency-Key header")
	}
}

// TestOpenAPICurrenciesAgreeWithServer: the document lists as currency enum
// exactly the three-letter codes the server accepts.
func TestOpenAPICurrenciesAgreeWithServer(t *testing.T) {
	raw, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions map[string]struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Definitions["v1CreateOrderRequest"].Properties["currency"].Enum
	if len(enum) < 100 || !slices.Contains(enum, "EUR") || !slices.Contains(enum, "JPY") || slices.Contains(enum, "XYZ") {
		t.Fatalf("currency enum %v", enum)
	}
	var accepted []string
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'Z'; b++ {
			for c := 'A'; c <= 'Z'; c++ {
				req := validRequest()
				req.Currency = string([]rune{a, b, c})
				_, v, err := validateCreate(req)
				if err != nil {
					t.Fatal(err)
				}
				if len(v) == 0 {
					accepted = append(accepted, req.Currency)
				}
			}
		}
	}
	if !slices.Equal(accepted, enum) {
		t.Fatalf("server accepts %d codes, document lists %d:\nserver   %v\ndocument %v", len(accepted), len(enum), accepted, enum)
	}
}

func TestRangePattern(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tt := range [][2]uint64{{0, 1_000_000_000_000}, {0, 9}, {1, 10_000}, {7, 7}, {15, 2345}, {0, math.MaxInt64}, {999, 1000}} {
		lo, hi := tt[0], tt[1]
		re := regexp.MustCompile(rangePattern(lo, hi))
		check := func(n uint64) {
			in := n >= lo && n <= hi
			if got := re.MatchString(strconv.FormatUint(n, 10)); got != in {
				t.Errorf("[%d, %d] %s: %d matched %v, want %v", lo, hi, re, n, got, in)
			}
		}
		for _, n := range []uint64{0, 1, 9, 10, lo, hi, hi + 1, hi * 10, math.MaxUint64} {
			check(n)
		}
		if lo > 0 {
			check(lo - 1)
		}
		for range 2000 {
			check(r.Uint64N(hi + hi/2 + 2))
			check(lo + r.Uint64N(hi-lo+1))
		}
		for _, bad := range []string{"", "-1", "01", "+1", "1.0", "1e3", " 1"} {
			if bad != "01" || lo <= 1 {
				if re.MatchString(bad) {
					t.Errorf("[%d, %d] matched %q", lo, hi, bad)
				}
			}
		}
	}
}

// TestOpenAPINullMatchesServer: a body property is x-nullable exactly when
// the server accepts JSON null for it (proto3 JSON reads null as unset),
// checked by decoding each null with the gateway's own marshaler and
// validating the result; a body is required exactly when an empty one is
// refused.
func TestOpenAPINullMatchesServer(t *testing.T) {
	raw, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	defs := asMap(doc["definitions"])
	props := func(def string) map[string]any { return asMap(asMap(defs[def])["properties"]) }
	nullable := func(def, prop string) bool { return asMap(props(def)[prop])["x-nullable"] == true }

	accepts := func(t *testing.T, body string, msg proto.Message, check func() int) bool {
		t.Helper()
		if err := RESTMarshaler().NewDecoder(strings.NewReader(body)).Decode(msg); err != nil {
			return false
		}
		return check() == 0
	}
	create := func(body string) (proto.Message, func() int) {
		req := &eventforgev1.CreateOrderRequest{}
		return req, func() int {
			_, v, err := validateCreate(req)
			if err != nil {
				t.Fatal(err)
			}
			return len(v)
		}
	}
	cases := []struct {
		def, prop, body string
		decode          func(string) (proto.Message, func() int)
	}{
		{"v1CreateOrderRequest", "customer_id", `{"customer_id":null,"currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, create},
		{"v1CreateOrderRequest", "currency", `{"customer_id":"c","currency":null,"items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, create},
		{"v1CreateOrderRequest", "items", `{"customer_id":"c","currency":"EUR","items":null}`, create},
		{"v1OrderItem", "sku", `{"customer_id":"c","currency":"EUR","items":[{"sku":null,"quantity":1,"unit_price_cents":"1"}]}`, create},
		{"v1OrderItem", "quantity", `{"customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":null,"unit_price_cents":"1"}]}`, create},
		{"v1OrderItem", "unit_price_cents", `{"customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":null}]}`, create},
		{"OrderServiceCancelOrderBody", "reason", `{"reason":null}`, func(string) (proto.Message, func() int) {
			req := &eventforgev1.CancelOrderRequest{}
			return req, func() int {
				req.OrderId = "0190a6f0-0000-7000-8000-000000000001" // from the path, after the body
				v, err := checkRules(req)
				if err != nil {
					t.Fatal(err)
				}
				return len(v)
			}
		}},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.def+"."+tc.prop, func(t *testing.T) {
			covered[tc.def+"."+tc.prop] = true
			msg, check := tc.decode(tc.body)
			if got, want := nullable(tc.def, tc.prop), accepts(t, tc.body, msg, check); got != want {
				t.Fatalf("x-nullable is %v, but the server accepts null: %v", got, want)
			}
		})
	}
	for _, def := range []string{"v1CreateOrderRequest", "v1OrderItem", "OrderServiceCancelOrderBody"} {
		for prop := range props(def) {
			if !covered[def+"."+prop] {
				t.Errorf("%s.%s: no case checks its null", def, prop)
			}
		}
	}

	bodyRequired := func(opID string) bool {
		for _, p := range asMap(doc["paths"]) {
			for _, o := range asMap(p) {
				if asMap(o)["operationId"] != opID {
					continue
				}
				params, _ := asMap(o)["parameters"].([]any)
				for _, param := range params {
					if asMap(param)["in"] == "body" {
						return asMap(param)["required"] == true
					}
				}
			}
		}
		t.Fatalf("%s has no body", opID)
		return false
	}
	if !bodyRequired("OrderService_CreateOrder") {
		t.Error("CreateOrder: body not required, but an empty create is refused")
	}
	if bodyRequired("OrderService_CancelOrder") {
		t.Error("CancelOrder: body required, but a cancel without a body is accepted")
	}
}
