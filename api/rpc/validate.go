package rpc

import (
	"fmt"
	"math"
	"regexp"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/eventforge/eventforge/api/store"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Limits of a valid order.
const (
	MaxCustomerIDLen = 128
	MaxItems         = 100
	MaxQuantity      = 10_000
)

var (
	skuPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
)

// validateCreate returns one violation per invalid field (field paths use
// the proto field names, e.g. items[1].quantity) and, when valid, the
// order total in cents.
func validateCreate(req *eventforgev1.CreateOrderRequest) (total int64, violations []*errdetails.BadRequest_FieldViolation) {
	add := func(field, format string, args ...any) {
		violations = append(violations, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	if n := utf8.RuneCountInString(req.GetCustomerId()); n < 1 || n > MaxCustomerIDLen {
		add("customer_id", "must be 1 to %d characters, got %d", MaxCustomerIDLen, n)
	}
	if !currencyPattern.MatchString(req.GetCurrency()) {
		add("currency", "must be an ISO 4217 code of three upper-case letters, got %q", req.GetCurrency())
	}
	items := req.GetItems()
	if len(items) < 1 || len(items) > MaxItems {
		add("items", "must hold 1 to %d items, got %d", MaxItems, len(items))
	}
	overflow := false
	for i, it := range items {
		if !skuPattern.MatchString(it.GetSku()) {
			add(fmt.Sprintf("items[%d].sku", i), "must match %s", skuPattern)
		}
		if q := it.GetQuantity(); q < 1 || q > MaxQuantity {
			add(fmt.Sprintf("items[%d].quantity", i), "must be 1 to %d, got %d", MaxQuantity, q)
		}
		price := it.GetUnitPriceCents()
		if price < 0 {
			add(fmt.Sprintf("items[%d].unit_price_cents", i), "must be zero or more, got %d", price)
			continue
		}
		line := int64(it.GetQuantity())
		if line > 0 && price > math.MaxInt64/line {
			overflow = true
			continue
		}
		line *= price
		if total > math.MaxInt64-line {
			overflow = true
			continue
		}
		total += line
	}
	if overflow {
		add("items", "order total overflows a 64-bit count of cents")
	}
	return total, violations
}

// Limits of the other requests.
const (
	// DefaultPageSize is the ListOrders page size when page_size is 0.
	DefaultPageSize = 50
	// MaxPageSize bounds ListOrders pages; larger page_size values are
	// coerced to it.
	MaxPageSize = 200
	// MaxReasonLen bounds CancelOrder.reason, in characters.
	MaxReasonLen = 500
	// MaxRequestIDLen bounds an idempotency key, in bytes.
	MaxRequestIDLen = 255
)

// validateList checks a ListOrders request and returns the store query it
// asks for, with Limit the page size to return.
func validateList(req *eventforgev1.ListOrdersRequest) (q store.ListQuery, violations []*errdetails.BadRequest_FieldViolation) {
	if n := utf8.RuneCountInString(req.GetCustomerId()); n > MaxCustomerIDLen {
		violations = append(violations, violation("customer_id", fmt.Sprintf("must be at most %d characters, got %d", MaxCustomerIDLen, n)))
	}
	q.CustomerID = req.GetCustomerId()
	if st := req.GetStatus(); st != eventforgev1.OrderStatus_ORDER_STATUS_UNSPECIFIED {
		name, ok := statuses[st]
		if !ok {
			violations = append(violations, violation("status", fmt.Sprintf("unknown order status %d", st)))
		}
		q.Status = name
	}
	switch size := req.GetPageSize(); {
	case size < 0:
		violations = append(violations, violation("page_size", fmt.Sprintf("must not be negative, got %d", size)))
	case size == 0:
		q.Limit = DefaultPageSize
	case size > MaxPageSize:
		q.Limit = MaxPageSize
	default:
		q.Limit = int(size)
	}
	if tok := req.GetPageToken(); tok != "" {
		pt, err := decodePageToken(tok)
		switch {
		case err != nil:
			violations = append(violations, violation("page_token", "is not a token this service issued"))
		case pt.Filter != filterDigest(req.GetCustomerId(), req.GetStatus()):
			violations = append(violations, violation("page_token", "was issued for other filters; send the same customer_id and status as the first page"))
		default:
			q.After = &store.Cursor{CreatedAt: pt.CreatedAt, ID: pt.ID}
		}
	}
	return q, violations
}

func validateReason(reason string) []*errdetails.BadRequest_FieldViolation {
	if !utf8.ValidString(reason) {
		return []*errdetails.BadRequest_FieldViolation{violation("reason", "must be valid UTF-8")}
	}
	if n := utf8.RuneCountInString(reason); n > MaxReasonLen {
		return []*errdetails.BadRequest_FieldViolation{violation("reason", fmt.Sprintf("must be at most %d characters, got %d", MaxReasonLen, n))}
	}
	return nil
}
