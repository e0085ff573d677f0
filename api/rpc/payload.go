package rpc

import (
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// errInvalidUTF8 is what appendOrderCreated returns for a string that is
// not UTF-8, which protojson refuses too. Requests never carry one: gRPC
// and the REST gateway refuse such strings before a handler runs.
var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// appendOrderCreated appends m to b as the JSON protojson writes with
// UseProtoNames (payloadJSON): proto field names, int64 as strings, fields
// with their zero value left out, the create time in RFC 3339 in UTC with
// 0, 3, 6 or 9 fractional digits. The column is jsonb, so only the value
// counts, not the spacing or field order. It is written by hand to spare
// every order protojson's reflection (docs/bench.md, *Codecs of their own
// for the order event*); the tests hold it to protojson's output for the
// same message, hand-built and with every field filled at random.
func appendOrderCreated(b []byte, m *eventforgev1.OrderCreated) ([]byte, error) {
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	var err error
	str := func(name, v string) {
		if v == "" || err != nil {
			return
		}
		field(name)
		b, err = appendJSONString(b, v)
	}
	str("order_id", m.GetOrderId())
	str("customer_id", m.GetCustomerId())
	str("currency", m.GetCurrency())
	if items := m.GetItems(); len(items) > 0 {
		field("items")
		b = append(b, '[')
		for i, it := range items {
			if i > 0 {
				b = append(b, ',')
			}
			b, first = append(b, '{'), true
			str("sku", it.GetSku())
			if q := it.GetQuantity(); q != 0 {
				field("quantity")
				b = strconv.AppendInt(b, int64(q), 10)
			}
			if p := it.GetUnitPriceCents(); p != 0 {
				field("unit_price_cents")
				b = appendQuotedInt(b, p)
			}
			b = append(b, '}')
		}
		b, first = append(b, ']'), false
	}
	if err != nil {
		return nil, err
	}
	if t := m.GetTotalCents(); t != 0 {
		field("total_cents")
		b = appendQuotedInt(b, t)
	}
	if ts := m.GetCreateTime(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, err
		}
		field("create_time")
		b = appendTimestamp(b, ts.AsTime())
	}
	return append(b, '}'), nil
}

func appendQuotedInt(b []byte, v int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, v, 10)
	return append(b, '"')
}

// appendTimestamp writes t as protojson writes a google.protobuf.Timestamp.
func appendTimestamp(b []byte, t time.Time) []byte {
	t = t.UTC()
	b = append(b, '"')
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	switch ns := t.Nanosecond(); {
	case ns == 0:
	case ns%1e6 == 0:
		b = appendFraction(b, ns/1e6, 3)
	case ns%1e3 == 0:
		b = appendFraction(b, ns/1e3, 6)
	default:
		b = appendFraction(b, ns, 9)
	}
	return append(b, 'Z', '"')
}

func appendFraction(b []byte, v, digits int) []byte {
	b = append(b, '.')
	s := strconv.Itoa(v)
	for range digits - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendJSONString writes s as a JSON string, escaping what JSON requires
// (the quote, the backslash and control characters), as protojson does.
func appendJSONString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, errInvalidUTF8
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}
