package rpc

import (
	"fmt"
	"net/url"
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
			continue // not a field: the default parser ignores it
		}
		for _, v := range vals {
			if err := checkQueryForm(fd, v); err != nil {
				return err
			}
		}
	}
	return p.DefaultQueryParser.Parse(msg, values, filter)
}

func checkQueryForm(fd protoreflect.FieldDescriptor, v string) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v) {
			return fmt.Errorf("parameter %q is not UTF-8", fd.Name())
		}
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByName(protoreflect.Name(v)) == nil && !decimalInteger.MatchString(v) {
			return fmt.Errorf("parameter %q: %q is neither the name nor the number of a value", fd.Name(), v)
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if !decimalInteger.MatchString(v) {
			return fmt.Errorf("parameter %q: %q is not a decimal integer", fd.Name(), v)
		}
	}
	return nil
}
