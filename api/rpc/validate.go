package rpc

import (
	"fmt"
	"math"
	"regexp"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

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
