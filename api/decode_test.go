package api

import (
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// rawCodec sends a request's bytes as they are, so a test can send what a
// protobuf library would refuse to encode.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// wire builds an encoded message: each field is a string (or nested
// message bytes) or an int.
type wire []byte

func (w wire) bytes(num protowire.Number, v string) wire {
	w = protowire.AppendTag(w, num, protowire.BytesType)
	return protowire.AppendString(w, v)
}

func (w wire) varint(num protowire.Number, v uint64) wire {
	w = protowire.AppendTag(w, num, protowire.VarintType)
	return protowire.AppendVarint(w, v)
}

// TestUndecodableRequestIsInvalidArgument: a gRPC request that does not
// decode (a string field holding invalid UTF-8, a length past the end, a
// broken tag) is INVALID_ARGUMENT with the field named, never INTERNAL,
// and writes nothing, for OrderService, health and reflection alike; a
// valid request sent the same way is served.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	item := func(sku string) string { return string(wire{}.bytes(1, sku).varint(2, 1).varint(3, 100)) }
	const orderID = "0190a6f0-0000-7000-8000-000000000001"
	tests := []struct {
		name, method string
		req          wire
		field        string // "" for none
	}{
		{"create customer_id", eventforgev1.OrderService_CreateOrder_FullMethodName,
			wire{}.bytes(1, "c\xff").bytes(2, "EUR").bytes(3, item("S")), "customer_id"},
		{"create currency", eventforgev1.OrderService_CreateOrder_FullMethodName,
			wire{}.bytes(1, "c").bytes(2, "E\xc3\x28").bytes(3, item("S")), "currency"},
		{"create second item's sku", eventforgev1.OrderService_CreateOrder_FullMethodName,
			wire{}.bytes(1, "c").bytes(2, "EUR").bytes(3, item("S")).bytes(3, item("S\xe2\x82")), "items[1].sku"},
		{"create request_id", eventforgev1.OrderService_CreateOrder_FullMethodName,
			wire{}.bytes(1, "c").bytes(2, "EUR").bytes(3, item("S")).bytes(4, "k\xed\xa0\x80"), "request_id"},
		{"create length past the end", eventforgev1.OrderService_CreateOrder_FullMethodName,
			append(protowire.AppendTag(nil, 1, protowire.BytesType), 10, 'a', 'b'), "customer_id"},
		{"create item cut off", eventforgev1.OrderService_CreateOrder_FullMethodName,
			wire{}.bytes(1, "c").bytes(2, "EUR").bytes(3, string(protowire.AppendTag(nil, 1, protowire.BytesType))+"\x05S"), "items[0].sku"},
		{"create broken tag", eventforgev1.OrderService_CreateOrder_FullMethodName, wire{0x80}, ""},
		{"get order_id", eventforgev1.OrderService_GetOrder_FullMethodName, wire{}.bytes(1, "\xff"), "order_id"},
		{"list customer_id", eventforgev1.OrderService_ListOrders_FullMethodName, wire{}.bytes(1, "\xfe"), "customer_id"},
		{"list page_token", eventforgev1.OrderService_ListOrders_FullMethodName, wire{}.varint(3, 10).bytes(4, "A\xff"), "page_token"},
		{"cancel reason", eventforgev1.OrderService_CancelOrder_FullMethodName, wire{}.bytes(1, orderID).bytes(2, "changed \xc0\xafmind"), "reason"},
	}
	before := counts(t, s.env)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp eventforgev1.GetOrderResponse // never filled: every call fails
			err := s.conn.Invoke(ctxTimeout(t), tt.method, []byte(tt.req), &resp, grpc.ForceCodecV2(rawCodec{}))
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("code %s (%v), want InvalidArgument", code, err)
			}
			var want []string
			if tt.field != "" {
				want = []string{tt.field}
			}
			if fields := grpcFields(err); !slices.Equal(fields, want) {
				t.Fatalf("violations %v, want %v (%v)", fields, want, err)
			}
		})
	}
	if c := counts(t, s.env); c != before {
		t.Fatalf("rows %+v, want %+v", c, before)
	}

	// The health service (unary) and reflection (a stream) decode the same way.
	var health healthpb.HealthCheckResponse
	err := s.conn.Invoke(ctxTimeout(t), healthpb.Health_Check_FullMethodName, []byte(wire{}.bytes(1, "eventforge\xff")), &health, grpc.ForceCodecV2(rawCodec{}))
	if fields := grpcFields(err); status.Code(err) != codes.InvalidArgument || !slices.Equal(fields, []string{"service"}) {
		t.Fatalf("health check: %v, violations %v; want InvalidArgument on service", err, fields)
	}
	stream, err := s.conn.NewStream(ctxTimeout(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg([]byte(wire{}.bytes(1, "h\xff").bytes(7, "*"))); err != nil {
		t.Fatal(err)
	}
	var listed reflectionpb.ServerReflectionResponse
	err = stream.RecvMsg(&listed)
	if fields := grpcFields(err); status.Code(err) != codes.InvalidArgument || !slices.Equal(fields, []string{"host"}) {
		t.Fatalf("reflection: %v, violations %v; want InvalidArgument on host", err, fields)
	}

	valid, err := proto.Marshal(validCreate())
	if err != nil {
		t.Fatal(err)
	}
	var created eventforgev1.CreateOrderResponse
	if err := s.conn.Invoke(ctxTimeout(t), eventforgev1.OrderService_CreateOrder_FullMethodName, valid, &created, grpc.ForceCodecV2(rawCodec{})); err != nil {
		t.Fatalf("valid create: %v", err)
	}
	if c := counts(t, s.env); c.Orders != before.Orders+1 || created.GetOrder().GetCustomerId() != "c-1" {
		t.Fatalf("valid create: rows %+v (before %+v), answer %v", c, before, &created)
	}
	for _, l := range s.logs.lines("rpc") {
		if l["code"] == "Internal" {
			t.Fatalf("a request was answered with an internal error: %v", l)
		}
	}
}
