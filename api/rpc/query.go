package rpc

import (
	"fmt"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// QueryParser returns the gateway's query parameter parser: the default
// one, after a check that every value of a request field is in the form
// /openapi.json describes: an enum by name or by its number, an integer in
// decimal ("5", not "+5" or "05").
func QueryParser() runtime.QueryParameterParser { return queryParser{} }

type queryParser struct{ runtime.DefaultQueryParser }

func (p queryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	fields := msg.ProtoReflect().Descriptor().Fields()
	for key, vals := range values {
		fd := fields.ByName(protoreflect.Name(key))
		if fd == nil {
			continue // not a field: the REST layer refuses it first
		}
		for _, v := range vals {
			if desc := QueryValueFault(fd, v); desc != "" {
				return fmt.Errorf("parameter %q %s", fd.Name(), desc)
			}
		}
	}
	return p.DefaultQueryParser.Parse(msg, values, filter)
}

// QueryValueFault returns what is wrong with v as the query value of field
// fd, in the form /openapi.json describes ("" when nothing is): a string
// that is not UTF-8, an enum value by neither name nor decimal number, an
// integer not in decimal or out of its type's range.
func QueryValueFault(fd protoreflect.FieldDescriptor, v string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v) {
			return "is not UTF-8"
		}
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByName(protoreflect.Name(v)) == nil && !decimalInteger.MatchString(v) {
			return "is neither the name nor the number of a value of " + string(fd.Enum().Name())
		}
		if _, err := strconv.ParseInt(v, 10, 32); err != nil && fd.Enum().Values().ByName(protoreflect.Name(v)) == nil {
			return "is out of range for an enum number"
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if !decimalInteger.MatchString(v) {
			return "is not a decimal integer"
		}
		return rangeFault(v, fd)
	case protoreflect.BoolKind:
		if v != "true" && v != "false" {
			return "is neither true nor false"
		}
	}
	return ""
}
