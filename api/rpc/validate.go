package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"buf.build/go/protovalidate"
	"github.com/google/uuid"
	"golang.org/x/text/currency"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/eventforge/eventforge/api/store"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// The field rules of every request are declared in orders.proto as
// buf.validate (protovalidate) rules: fieldRules enforces them, and OpenAPI
// publishes them. This file adds only what a field rule cannot say: the
// currency list, the page token's signature, and the idempotency key's
// header.

// Paging limits of ListOrders.
const (
	// DefaultPageSize is the ListOrders page size when page_size is 0.
	DefaultPageSize = 50
	// MaxPageSize bounds ListOrders pages; larger page_size values are
	// coerced to it.
	MaxPageSize = 200
)

// patternWords describes in words the patterns orders.proto declares, so a
// client reads what is wrong rather than a regular expression. A pattern
// missing here is reported by protovalidate's own message, which quotes it.
var patternWords = map[string]string{
	// Every free-text request string: no character of Unicode category Cc.
	`^[^\x00-\x1F\x7F-\x9F]*$`: "must not contain control characters (U+0000 to U+001F, U+007F to U+009F)",
	// currency (then checked against the ISO 4217 list).
	`^[A-Z]{3}$`: "must be an ISO 4217 code of three upper-case letters, e.g. EUR",
	// request_id / Idempotency-Key.
	`^[!-~]*$`: "must hold printable ASCII characters only (! to ~, no space)",
	// OrderItem.sku.
	`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`: "must be a letter or digit followed by at most 63 letters, digits, '.', '_' or '-'",
	// ListOrdersRequest.page_token.
	`^([A-Za-z0-9_-]{66})?$`: "must be empty or a next_page_token this service returned",
}

// requests are the messages whose rules the service enforces.
var requests = []proto.Message{
	&eventforgev1.CreateOrderRequest{},
	&eventforgev1.GetOrderRequest{},
	&eventforgev1.ListOrdersRequest{},
	&eventforgev1.CancelOrderRequest{},
}

var ruleValidator = sync.OnceValues(func() (protovalidate.Validator, error) {
	return protovalidate.New(protovalidate.WithMessages(requests...))
})

// checkRules returns one violation per field that breaks a rule declared in
// orders.proto, named by its proto path (items[1].quantity); the
// descriptions of several broken rules of one field are joined. The error is
// not nil only when the rules themselves cannot be evaluated.
func checkRules(msg proto.Message) ([]*errdetails.BadRequest_FieldViolation, error) {
	v, err := ruleValidator()
	if err != nil {
		return nil, fmt.Errorf("compiling the request rules: %w", err)
	}
	err = v.Validate(msg)
	var verr *protovalidate.ValidationError
	switch {
	case err == nil:
		return nil, nil
	case !errors.As(err, &verr):
		return nil, fmt.Errorf("evaluating the request rules: %w", err)
	}
	var out []*errdetails.BadRequest_FieldViolation
	byField := map[string]*errdetails.BadRequest_FieldViolation{}
	for _, viol := range verr.Violations {
		field := protovalidate.FieldPathString(viol.Proto.GetField())
		desc := viol.Proto.GetMessage()
		if viol.Proto.GetRuleId() == "string.pattern" && viol.RuleValue.IsValid() {
			if words, ok := patternWords[viol.RuleValue.String()]; ok {
				desc = words
			}
		}
		if prev, ok := byField[field]; ok {
			prev.Description += "; " + desc
			continue
		}
		fv := violation(field, desc)
		byField[field] = fv
		out = append(out, fv)
	}
	return out, nil
}

// fieldViolated reports whether violations name field.
func fieldViolated(violations []*errdetails.BadRequest_FieldViolation, field string) bool {
	return slices.ContainsFunc(violations, func(v *errdetails.BadRequest_FieldViolation) bool { return v.GetField() == field })
}

// Currencies returns the ISO 4217 codes CreateOrder accepts, sorted: the
// tender currencies in use today according to golang.org/x/text/currency
// (CLDR data). Test codes (XTS, XXX), precious metals and withdrawn
// currencies are not among them.
func Currencies() []string {
	return slices.Clone(currencyList())
}

var currencyList = sync.OnceValue(func() []string {
	seen := map[string]bool{}
	for it := currency.Query(); it.Next(); {
		seen[it.Unit().String()] = true
	}
	codes := make([]string, 0, len(seen))
	for c := range seen {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	return codes
})

func isCurrency(code string) bool {
	_, found := slices.BinarySearch(currencyList(), code)
	return found
}

// validateCreate checks a create request against its rules and, when valid,
// returns the order total in cents. The rules bound every item (at most 100
// items of at most 10,000 units at most 10^12 cents each), so the total is at
// most 10^18 and cannot overflow.
func validateCreate(req *eventforgev1.CreateOrderRequest) (total int64, violations []*errdetails.BadRequest_FieldViolation, err error) {
	violations, err = checkRules(req)
	if err != nil {
		return 0, nil, err
	}
	if c := req.GetCurrency(); !fieldViolated(violations, "currency") && !isCurrency(c) {
		violations = append(violations, violation("currency", fmt.Sprintf("%q is not the ISO 4217 code of a currency in use", c)))
	}
	if len(violations) > 0 {
		return 0, violations, nil
	}
	for _, it := range req.GetItems() {
		total += int64(it.GetQuantity()) * it.GetUnitPriceCents()
	}
	return total, nil, nil
}

// orderRequest is a request that names one order.
type orderRequest interface {
	proto.Message
	GetOrderId() string
}

// orderID checks a request that names one order against its rules and
// returns the order's ID, or the gRPC error to answer with: InvalidArgument
// with the field violations, or Internal (logged as what) when the rules
// could not be evaluated.
func (s *Server) orderID(ctx context.Context, req orderRequest, what string) (uuid.UUID, error) {
	violations, err := checkRules(req)
	if err != nil {
		return uuid.Nil, s.internal(ctx, what, err)
	}
	if len(violations) > 0 {
		return uuid.Nil, invalidArgument(violations)
	}
	id, err := uuid.Parse(req.GetOrderId())
	if err != nil { // the uuid rule admits nothing uuid.Parse refuses
		return uuid.Nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{violation("order_id", "must be a UUID")})
	}
	return id, nil
}

// validateList checks a ListOrders request and returns the store query it
// asks for, with Limit the page size to return.
func (s *Server) validateList(req *eventforgev1.ListOrdersRequest) (q store.ListQuery, violations []*errdetails.BadRequest_FieldViolation, err error) {
	violations, err = checkRules(req)
	if err != nil {
		return q, nil, err
	}
	q.CustomerID = req.GetCustomerId()
	if st := req.GetStatus(); st != eventforgev1.OrderStatus_ORDER_STATUS_UNSPECIFIED {
		q.Status = statuses[st]
	}
	switch size := req.GetPageSize(); {
	case size <= 0:
		q.Limit = DefaultPageSize
	case size > MaxPageSize:
		q.Limit = MaxPageSize
	default:
		q.Limit = int(size)
	}
	if tok := req.GetPageToken(); tok != "" && !fieldViolated(violations, "page_token") {
		pt, err := s.pageTokens.decode(tok)
		switch {
		case err != nil:
			violations = append(violations, violation("page_token", "is not a token this service issued"))
		case pt.Filter != filterDigest(req.GetCustomerId(), req.GetStatus()):
			violations = append(violations, violation("page_token", "was issued for other filters; send the same customer_id and status as the first page"))
		default:
			q.After = &store.Cursor{CreatedAt: pt.CreatedAt, ID: pt.ID}
		}
	}
	return q, violations, nil
}

// renameField renames the violations of field from to field to.
func renameField(violations []*errdetails.BadRequest_FieldViolation, from, to string) {
	for _, v := range violations {
		if v.GetField() == from {
			v.Field = to
		}
	}
}
