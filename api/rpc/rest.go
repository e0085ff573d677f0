package rpc

import (
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
)

// RESTMarshaler is the JSON mapping of the REST gateway: proto field names
// (snake_case), every field emitted, and unknown request fields refused
// (protojson's default), so a misspelt field is an error and not a silently
// empty value.
func RESTMarshaler() runtime.Marshaler {
	return &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{},
	}}
}
