package rpc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// IdempotencyKeyMetadata is the gRPC metadata key that carries an
// idempotency key; the REST gateway forwards the Idempotency-Key header
// under it.
const IdempotencyKeyMetadata = "idempotency-key"

// IdempotencyKeyHeader is the REST header of the idempotency key.
const IdempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey returns the request's idempotency key ("" when it has none)
// and where it came from (request_id or the Idempotency-Key header): the
// request_id field or the idempotency-key metadata, which must agree when
// both are set. The key's own rules are those of request_id in orders.proto,
// checked with the rest of the request.
func idempotencyKey(ctx context.Context, req *eventforgev1.CreateOrderRequest) (key, from string, violations []*errdetails.BadRequest_FieldViolation) {
	field := req.GetRequestId()
	var header string
	if vals := metadata.ValueFromIncomingContext(ctx, IdempotencyKeyMetadata); len(vals) > 0 {
		header = vals[0]
		if len(vals) > 1 {
			return "", "", []*errdetails.BadRequest_FieldViolation{violation(IdempotencyKeyHeader, "must be sent once")}
		}
		if header == "" {
			return "", "", []*errdetails.BadRequest_FieldViolation{violation(IdempotencyKeyHeader, "must not be empty when sent")}
		}
	}
	switch {
	case field != "" && header != "" && field != header:
		return "", "", []*errdetails.BadRequest_FieldViolation{violation("request_id", "differs from the Idempotency-Key header; send one of them, or the same key in both")}
	case field != "":
		return field, "request_id", nil
	case header != "":
		return header, IdempotencyKeyHeader, nil
	}
	return "", "", nil
}

// KeyHeaderError returns the INVALID_ARGUMENT error for an Idempotency-Key
// header value that breaks the rules of request_id (nil when it keeps
// them). The REST gateway drops a header value that gRPC metadata cannot
// carry (anything but printable ASCII), so the REST layer checks such a
// value itself.
func KeyHeaderError(key string) error {
	violations, err := checkRules(&eventforgev1.CreateOrderRequest{RequestId: key})
	if err != nil {
		return err
	}
	violations = slices.DeleteFunc(violations, func(v *errdetails.BadRequest_FieldViolation) bool { return v.GetField() != "request_id" })
	if len(violations) == 0 {
		return nil
	}
	renameField(violations, "request_id", IdempotencyKeyHeader)
	return invalidArgument(violations)
}

// requestHash is a digest of everything in a create request that defines the
// order (not the idempotency key itself): a retry must hash the same. Every
// field is length-prefixed, so no two different requests share an encoding.
func requestHash(req *eventforgev1.CreateOrderRequest) []byte {
	h := sha256.New()
	writeString(h, "eventforge.v1.CreateOrderRequest/1")
	writeString(h, req.GetCustomerId())
	writeString(h, req.GetCurrency())
	writeUint(h, uint64(len(req.GetItems())))
	for _, it := range req.GetItems() {
		writeString(h, it.GetSku())
		writeUint(h, uint64(int64(it.GetQuantity())))
		writeUint(h, uint64(it.GetUnitPriceCents()))
	}
	return h.Sum(nil)
}

func writeString(h hash.Hash, s string) {
	writeUint(h, uint64(len(s)))
	h.Write([]byte(s))
}

func writeUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h.Write(b[:])
}
