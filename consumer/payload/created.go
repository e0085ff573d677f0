package payload

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// decodeCreated reads the OrderCreated payloads the api writes, as
// PostgreSQL's jsonb gives them back, without protojson's reflection (a
// share of the consumer's CPU per event worth saving; docs/bench.md,
// *Codecs of their own for the order event*): one object with the proto
// field names,
// strings without escapes, integers in their shortest form (int64 as
// strings or numbers), each field at most once. It reports false for
// anything else, valid or not (an escape, a field it does not know, the
// JSON names, a null, a fraction): protojson then decodes it, so what is
// accepted, refused or ignored stays protojson's decision. For what it
// accepts it gives the message protojson gives; the tests hold it to that.
func decodeCreated(data []byte) (*eventforgev1.OrderCreated, bool) {
	d := scanner{data: data}
	var m eventforgev1.OrderCreated
	var seen [6]bool
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "order_id":
			return d.once(&seen[0]) && d.str(&m.OrderId)
		case "customer_id":
			return d.once(&seen[1]) && d.str(&m.CustomerId)
		case "currency":
			return d.once(&seen[2]) && d.str(&m.Currency)
		case "items":
			return d.once(&seen[3]) && d.items(&m.Items)
		case "total_cents":
			return d.once(&seen[4]) && d.int64(&m.TotalCents)
		case "create_time":
			return d.once(&seen[5]) && d.timestamp(&m.CreateTime)
		}
		return false
	})
	if !ok || d.skipSpace() != len(data) {
		return nil, false
	}
	return &m, true
}

// scanner reads the subset of JSON decodeCreated accepts. Every method
// reports false at the first byte outside that subset.
type scanner struct {
	data []byte
	pos  int
}

// skipSpace moves past JSON whitespace and returns the new position.
func (d *scanner) skipSpace() int {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return d.pos
		}
	}
	return d.pos
}

func (d *scanner) byte(c byte) bool {
	if d.skipSpace() < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *scanner) once(seen *bool) bool {
	if *seen {
		return false // protojson refuses a field given twice
	}
	*seen = true
	return true
}

// object reads {"key": value, ...}, calling member after each key and its
// colon to read the value.
func (d *scanner) object(member func(key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		key, ok := d.raw()
		if !ok || !d.byte(':') || !member(key) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// raw reads a string without escapes or control characters, in UTF-8, and
// returns its bytes.
func (d *scanner) raw() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.pos
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			s := d.data[start:d.pos]
			d.pos++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

func (d *scanner) str(v *string) bool {
	s, ok := d.raw()
	*v = string(s)
	return ok
}

// integer reads an integer of bitSize bits, as a number or a string, in its
// shortest form: an optional minus and digits without leading zeros.
func (d *scanner) integer(bitSize int) (int64, bool) {
	var digits []byte
	if d.skipSpace() < len(d.data) && d.data[d.pos] == '"' {
		s, ok := d.raw()
		if !ok {
			return 0, false
		}
		digits = s
	} else {
		start := d.pos
		for d.pos < len(d.data) && (d.data[d.pos] == '-' || d.data[d.pos] >= '0' && d.data[d.pos] <= '9') {
			d.pos++
		}
		digits = d.data[start:d.pos]
	}
	u := bytes.TrimPrefix(digits, []byte("-"))
	if len(u) == 0 || len(u) > 1 && u[0] == '0' || bytes.IndexFunc(u, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(digits), 10, bitSize)
	return n, err == nil
}

func (d *scanner) int64(v *int64) bool {
	n, ok := d.integer(64)
	*v = n
	return ok
}

func (d *scanner) items(v *[]*eventforgev1.OrderItem) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		return true
	}
	for {
		it := &eventforgev1.OrderItem{}
		var seen [3]bool
		ok := d.object(func(key []byte) bool {
			switch string(key) {
			case "sku":
				return d.once(&seen[0]) && d.str(&it.Sku)
			case "quantity":
				n, ok := d.integer(32)
				it.Quantity = int32(n)
				return d.once(&seen[1]) && ok
			case "unit_price_cents":
				return d.once(&seen[2]) && d.int64(&it.UnitPriceCents)
			}
			return false
		})
		if !ok {
			return false
		}
		*v = append(*v, it)
		if d.byte(']') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// timestamp reads a google.protobuf.Timestamp under protojson's rules:
// RFC 3339, within years 1 to 9999, at most nine fractional digits.
func (d *scanner) timestamp(v **timestamppb.Timestamp) bool {
	s, ok := d.raw()
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		return false
	}
	const minSeconds, maxSeconds = -62135596800, 253402300799
	if secs := t.Unix(); secs < minSeconds || secs > maxSeconds {
		return false
	}
	i := bytes.LastIndexByte(s, '.')
	j := bytes.LastIndexAny(s, "Z-+")
	if i >= 0 && j >= i && j-i > len(".999999999") {
		return false
	}
	*v = &timestamppb.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
	return true
}
