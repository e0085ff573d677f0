// Package eventforgev1 holds the eventforge.v1 contracts: the OrderService
// gRPC API, its REST gateway and the payloads of the events it records. All
// files but this one are generated from the .proto files by `make generate`.
package eventforgev1

import _ "embed"

// OpenAPI is the OpenAPI v2 (Swagger) JSON document of the REST gateway,
// generated from the .proto files, gateway.yaml and openapi.yaml.
//
//go:embed openapi.swagger.json
var OpenAPI []byte
