package envoymsg

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// google.protobuf.Struct / Value / ListValue field numbers.
const (
	structFields     protowire.Number = 1
	entryKey         protowire.Number = 1
	entryValue       protowire.Number = 2
	valueNull        protowire.Number = 1
	valueNumber      protowire.Number = 2
	valueString      protowire.Number = 3
	valueBool        protowire.Number = 4
	valueStruct      protowire.Number = 5
	valueList        protowire.Number = 6
	listValuesNumber protowire.Number = 1
)

// A Struct is encoded in one walk: each nested message is written after a
// one-byte length placeholder that is patched (and widened, moving the
// payload, when it is 128 bytes or more) once the payload is written. Sizing
// first and writing second walked every nested map once per level above it,
// and a map is iterated in a new order each time, so no size list could be
// kept between the walks. The same walk holds the default codec's rule that
// proto3 strings are UTF-8 (ok false).

// appendStructBody appends the fields of s (a Struct's body, no length).
func appendStructBody(b []byte, s *structpb.Struct) (_ []byte, ok bool) {
	for k, v := range s.GetFields() {
		if !utf8.ValidString(k) {
			return b, false
		}
		b = protowire.AppendTag(b, structFields, protowire.BytesType)
		entry := len(b)
		b = append(b, 0)
		// Key and value are always written, as protobuf-go writes map entries.
		b = protowire.AppendTag(b, entryKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, entryValue, protowire.BytesType)
		val := len(b)
		b = append(b, 0)
		if b, ok = appendValueBody(b, v); !ok {
			return b, false
		}
		b = patchLen(b, val)
		b = patchLen(b, entry)
	}
	return b, true
}

// appendValueBody appends the body of one Value.
func appendValueBody(b []byte, v *structpb.Value) (_ []byte, ok bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		b = protowire.AppendTag(b, valueNull, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(k.NullValue)), true
	case *structpb.Value_NumberValue:
		b = protowire.AppendTag(b, valueNumber, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(k.NumberValue)), true
	case *structpb.Value_StringValue:
		b = protowire.AppendTag(b, valueString, protowire.BytesType)
		return protowire.AppendString(b, k.StringValue), utf8.ValidString(k.StringValue)
	case *structpb.Value_BoolValue:
		b = protowire.AppendTag(b, valueBool, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(k.BoolValue)), true
	case *structpb.Value_StructValue:
		b = protowire.AppendTag(b, valueStruct, protowire.BytesType)
		at := len(b)
		b = append(b, 0)
		if b, ok = appendStructBody(b, k.StructValue); !ok {
			return b, false
		}
		return patchLen(b, at), true
	case *structpb.Value_ListValue:
		b = protowire.AppendTag(b, valueList, protowire.BytesType)
		list := len(b)
		b = append(b, 0)
		for _, e := range k.ListValue.GetValues() {
			b = protowire.AppendTag(b, listValuesNumber, protowire.BytesType)
			at := len(b)
			b = append(b, 0)
			if b, ok = appendValueBody(b, e); !ok {
				return b, false
			}
			b = patchLen(b, at)
		}
		return patchLen(b, list), true
	}
	return b, true
}

// patchLen writes the length of the payload that follows the one-byte
// placeholder at b[at], widening the varint when the payload needs it.
func patchLen(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-1)...)
	copy(b[at+w:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}
