// Package protofill fills protocol buffer messages with random values for
// property tests of hand-written codecs. Every field is set, to a value that
// is not its zero value, so that protojson writes every field and a codec
// that leaves one out (a field added to the .proto later, say) differs from
// protojson's output for the same message.
//
// It is a test harness: import it from _test.go files only.
package protofill

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DefaultAlphabet is what strings are made of unless Options say otherwise:
// letters, digits and punctuation, every character JSON escapes (the quote,
// the backslash, control characters), and multi-byte UTF-8.
var DefaultAlphabet = []string{
	"a", "Z", "0", "9", "-", "_", ".", " ", "/", "<", "&", "\"", "\\",
	"\n", "\t", "\x00", "\x1f", "\x7f", "é", "日", "😀", "\u2028",
}

// MaxDepth is how deep Fill goes into nested messages; message fields below
// it are left unset, so that a recursive message ends.
const MaxDepth = 8

// Options say how values are drawn. The zero value is ready to use.
type Options struct {
	// Alphabet holds the pieces strings are made of (1 to 8 of them each,
	// drawn at random); empty means DefaultAlphabet. Each piece must be
	// valid UTF-8.
	Alphabet []string
}

// Fill is Options{}.Fill.
func Fill(r *rand.Rand, m proto.Message) error {
	return Options{}.Fill(r, m)
}

// Fill sets every field of m, drawn from r, to a value that is not the
// field's zero value: a bool true, a number other than 0 (small, large or
// at the bounds of its type), a non-empty string or bytes, an enum value
// other than the zero one (where the enum has one), one to three elements of
// a repeated field or map, and a message filled the same way, down to
// MaxDepth. Of a oneof, one field is set, drawn at random.
//
// The well-known types protojson writes in forms of their own are filled
// as one value that protojson accepts: a google.protobuf.Timestamp within
// years 1 to 9999 with 0, 3, 6 or 9 fractional digits (nanos 0 for whole
// seconds), and a google.protobuf.Duration within ±10,000 years. Fill refuses Any, Struct, Value, ListValue and
// FieldMask, whose values are not arbitrary.
func (o Options) Fill(r *rand.Rand, m proto.Message) error {
	return o.message(r, m.ProtoReflect(), 0)
}

func (o Options) message(r *rand.Rand, m protoreflect.Message, depth int) error {
	switch name := m.Descriptor().FullName(); name {
	case "google.protobuf.Timestamp":
		const minSeconds, maxSeconds = -62135596800, 253402300799
		setTime(r, m, minSeconds+r.Int64N(maxSeconds-minSeconds+1), false)
		return nil
	case "google.protobuf.Duration":
		const maxSeconds = 315576000000
		setTime(r, m, r.Int64N(2*maxSeconds+1)-maxSeconds, true)
		return nil
	case "google.protobuf.Any", "google.protobuf.Struct", "google.protobuf.Value",
		"google.protobuf.ListValue", "google.protobuf.FieldMask":
		return fmt.Errorf("protofill: %s is not supported", name)
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if oneof := fd.ContainingOneof(); oneof != nil && !oneof.IsSynthetic() {
			continue
		}
		if err := o.field(r, m, fd, depth); err != nil {
			return err
		}
	}
	oneofs := m.Descriptor().Oneofs()
	for i := range oneofs.Len() {
		if oneof := oneofs.Get(i); !oneof.IsSynthetic() {
			if err := o.field(r, m, oneof.Fields().Get(r.IntN(oneof.Fields().Len())), depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// field sets fd of m.
func (o Options) field(r *rand.Rand, m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) error {
	isMessage := fd.Message() != nil && !fd.IsMap()
	if isMessage && depth >= MaxDepth {
		return nil
	}
	switch {
	case fd.IsList():
		list := m.Mutable(fd).List()
		for range 1 + r.IntN(3) {
			if fd.Message() != nil {
				v := list.NewElement()
				if err := o.message(r, v.Message(), depth+1); err != nil {
					return err
				}
				list.Append(v)
				continue
			}
			list.Append(o.scalar(r, fd))
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for range 1 + r.IntN(3) {
			key := o.scalar(r, fd.MapKey()).MapKey()
			if fd.MapValue().Message() != nil {
				v := mp.NewValue()
				if err := o.message(r, v.Message(), depth+1); err != nil {
					return err
				}
				mp.Set(key, v)
				continue
			}
			mp.Set(key, o.scalar(r, fd.MapValue()))
		}
	case isMessage:
		return o.message(r, m.Mutable(fd).Message(), depth+1)
	default:
		m.Set(fd, o.scalar(r, fd))
	}
	return nil
}

// scalar draws a value of fd's kind other than its zero value.
func (o Options) scalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(enumValue(r, fd.Enum()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(signed(r, math.MinInt32, math.MaxInt32)))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(signed(r, math.MinInt64, math.MaxInt64))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(unsigned(r, math.MaxUint32)))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(unsigned(r, math.MaxUint64))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(nonZeroFloat(r, 30)))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(nonZeroFloat(r, 300))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(o.text(r))
	case protoreflect.BytesKind:
		b := make([]byte, 1+r.IntN(8))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic(fmt.Sprintf("protofill: field %s of kind %s", fd.FullName(), fd.Kind()))
}

// text is 1 to 8 pieces of the alphabet.
func (o Options) text(r *rand.Rand) string {
	alphabet := o.Alphabet
	if len(alphabet) == 0 {
		alphabet = DefaultAlphabet
	}
	var s strings.Builder
	for range 1 + r.IntN(8) {
		s.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return s.String()
}

// signed is a non-zero integer in [lo, hi]: small, anywhere, or a bound.
func signed(r *rand.Rand, lo, hi int64) int64 {
	switch r.IntN(3) {
	case 0:
		if v := r.Int64N(201) - 100; v != 0 {
			return v
		}
		return 1
	case 1:
		v := int64(r.Uint64()) // [lo, hi] is all of int64
		if lo != math.MinInt64 || hi != math.MaxInt64 {
			v = lo + r.Int64N(hi-lo+1)
		}
		if v == 0 {
			return 1
		}
		return v
	default:
		return []int64{lo, hi}[r.IntN(2)]
	}
}

// unsigned is a non-zero integer in [1, hi]: small, anywhere, or the bound.
func unsigned(r *rand.Rand, hi uint64) uint64 {
	switch r.IntN(3) {
	case 0:
		return 1 + r.Uint64N(100)
	case 1:
		return 1 + r.Uint64N(hi)
	default:
		return hi
	}
}

// nonZeroFloat is a finite non-zero number of magnitude 10^±maxExp at most.
func nonZeroFloat(r *rand.Rand, maxExp int) float64 {
	v := (0.5 + r.Float64()) * math.Pow(10, float64(r.IntN(2*maxExp+1)-maxExp))
	if r.IntN(2) == 0 {
		v = -v
	}
	return v
}

// enumValue is a value of e other than its zero one, or 0 when e has no
// other.
func enumValue(r *rand.Rand, e protoreflect.EnumDescriptor) protoreflect.EnumNumber {
	var nonZero []protoreflect.EnumNumber
	for i := range e.Values().Len() {
		if n := e.Values().Get(i).Number(); n != 0 {
			nonZero = append(nonZero, n)
		}
	}
	if len(nonZero) == 0 {
		return 0
	}
	return nonZero[r.IntN(len(nonZero))]
}

// setTime sets the seconds and nanos of a Timestamp or Duration, the nanos
// with 0, 3, 6 or 9 digits and, for a Duration, the sign of the seconds.
func setTime(r *rand.Rand, m protoreflect.Message, seconds int64, duration bool) {
	nanos := int32(r.Int64N(1e9))
	nanos -= nanos % []int32{1e9, 1e6, 1e3, 1}[r.IntN(4)]
	if duration && seconds < 0 {
		nanos = -nanos
	}
	fields := m.Descriptor().Fields()
	m.Set(fields.ByName("seconds"), protoreflect.ValueOfInt64(seconds))
	m.Set(fields.ByName("nanos"), protoreflect.ValueOfInt32(nanos))
}
