package rpc

import (
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// grpc-go decodes a request before the service or any interceptor sees it
// and answers every decoding failure with INTERNAL, a server error, although
// the bytes came from the client: a string field holding invalid UTF-8
// (which proto3 forbids), a length running past the end of the message.
// Codec, ServiceDesc and StreamDecoding move the decoding of a request
// into its method handler or stream, where a failure becomes
// INVALID_ARGUMENT with a google.rpc.BadRequest naming the offending field,
// as every other invalid request is answered.

// Codec returns the server codec for grpc.ForceServerCodecV2: grpc-go's
// proto codec, except that a request bound for a handler of ServiceDesc or
// a stream of StreamDecoding is handed over undecoded, for them to decode.
func Codec() encoding.CodecV2 {
	return codec{base: encoding.GetCodecV2(grpcproto.Name)}
}

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawRequest); ok {
		r.b = data.Materialize()
		return nil
	}
	return c.base.Unmarshal(data, v)
}

// rawRequest carries a request's encoded bytes from Codec to the handler.
type rawRequest struct{ b []byte }

// ServiceDesc returns desc with every unary method decoding its own request
// (served with Codec, which leaves the decoding to it): a request that does
// not decode is refused with INVALID_ARGUMENT and reaches neither the
// interceptors nor the service. Register the result in place of desc.
func ServiceDesc(desc grpc.ServiceDesc) grpc.ServiceDesc {
	desc.Methods = slices.Clone(desc.Methods)
	for i, m := range desc.Methods {
		handler := m.Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			return handler(srv, ctx, func(v any) error {
				var raw rawRequest
				if err := dec(&raw); err != nil {
					return err
				}
				msg, ok := v.(proto.Message)
				if !ok {
					return status.Errorf(codes.Internal, "request type %T is not a protobuf message", v)
				}
				return decodeRequest(raw.b, msg)
			}, interceptor)
		}
	}
	return desc
}

// StreamDecoding returns a stream interceptor under which every message a
// streaming method receives is decoded as ServiceDesc decodes a unary
// request (served with Codec): one that does not decode ends the stream
// with INVALID_ARGUMENT.
func StreamDecoding() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, decodingStream{ss})
	}
}

type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return s.ServerStream.RecvMsg(m)
	}
	var raw rawRequest
	if err := s.ServerStream.RecvMsg(&raw); err != nil {
		return err
	}
	return decodeRequest(raw.b, msg)
}

// decodeRequest decodes b into msg as grpc-go's proto codec does; a failure
// is INVALID_ARGUMENT naming the field whose bytes are wrong, when one is.
func decodeRequest(b []byte, msg proto.Message) error {
	err := proto.Unmarshal(b, msg)
	if err == nil {
		return nil
	}
	field, desc := wireFault(b, msg.ProtoReflect().Descriptor())
	if field == "" || desc == "" {
		return status.Errorf(codes.InvalidArgument, "invalid request: not a valid %s message", msg.ProtoReflect().Descriptor().FullName())
	}
	return invalidArgument([]*errdetails.BadRequest_FieldViolation{violation(field, desc)})
}

// wireFault walks b, the encoding of a message md, and returns the path of
// the first field whose bytes are invalid (in the form of protovalidate's
// field paths: items[1].sku) and what is wrong with them. field is "" when
// no field is to blame (a broken tag at the top level), desc is "" when
// nothing is wrong.
func wireFault(b []byte, md protoreflect.MessageDescriptor) (field, desc string) {
	seen := map[protoreflect.FieldNumber]int{} // elements of repeated fields so far
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "is not a valid protobuf message"
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		name := ""
		if fd != nil {
			name = string(fd.Name())
			if fd.IsList() {
				name += fmt.Sprintf("[%d]", seen[num])
				seen[num]++
			}
		}
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return name, "is not a valid protobuf value"
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return name, "runs past the end of the message"
		}
		b = b[n:]
		switch {
		case fd == nil:
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return name, "is not valid UTF-8"
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			if inner, d := wireFault(v, fd.Message()); d != "" {
				if inner == "" {
					return name, d
				}
				return name + "." + inner, d
			}
		}
	}
	return "", ""
}
