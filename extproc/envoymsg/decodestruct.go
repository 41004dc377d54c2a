package envoymsg

import (
	"math"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// maxStructDepth bounds the recursion of a hand-decoded Struct; deeper
// ones go to protobuf-go, which has its own limit.
const maxStructDepth = 32

// metadataFilterMetadata is config.core.v3.Metadata's filter_metadata.
var metadataFilterMetadata = fieldNumber(&corev3.Metadata{}, "filter_metadata")

// metadata decodes a Metadata whose only field is filter_metadata (what
// Envoy's metadata_options forward); typed_filter_metadata is left to
// protobuf-go.
func (d *decoder) metadata(b []byte) (*corev3.Metadata, bool) {
	m := new(corev3.Metadata)
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num != metadataFilterMetadata || f.typ != protowire.BytesType {
			return nil, false
		}
		b = rest
		if !d.structEntry(f.bytes, &m.FilterMetadata) {
			return nil, false
		}
	}
	return m, true
}

// structBody decodes a google.protobuf.Struct's fields.
func (d *decoder) structBody(b []byte, depth int) (*structpb.Struct, bool) {
	if depth > maxStructDepth {
		return nil, false
	}
	s := &structpb.Struct{}
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num != structFields || f.typ != protowire.BytesType {
			return nil, false
		}
		b = rest
		if !d.valueEntry(f.bytes, s, depth) {
			return nil, false
		}
	}
	return s, true
}

// valueEntry decodes one entry of a Struct's fields map; a missing value
// is an empty Value, a repeated key replaces the earlier entry.
func (d *decoder) valueEntry(b []byte, s *structpb.Struct, depth int) bool {
	var key string
	var val []byte
	var seenKey, seenVal bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.typ != protowire.BytesType {
			return false
		}
		b = rest
		switch {
		case f.num == entryKey && !seenKey:
			seenKey = true
			if key, ok = d.string(f.bytes); !ok {
				return false
			}
		case f.num == entryValue && !seenVal:
			seenVal, val = true, f.bytes
		default:
			return false
		}
	}
	v, ok := d.value(val, depth)
	if !ok {
		return false
	}
	if s.Fields == nil {
		s.Fields = make(map[string]*structpb.Value, 4)
	}
	s.Fields[key] = v
	return true
}

// value decodes a Value: one kind, the last one given (a oneof), except a
// struct or list given twice, which protobuf merges.
func (d *decoder) value(b []byte, depth int) (*structpb.Value, bool) {
	v := &structpb.Value{}
	var seenMessage bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == valueNumber && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			v.Kind = &structpb.Value_NumberValue{NumberValue: math.Float64frombits(x)}
		case (num == valueNull || num == valueBool) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			if num == valueNull {
				v.Kind = &structpb.Value_NullValue{NullValue: structpb.NullValue(int32(x))}
			} else {
				v.Kind = &structpb.Value_BoolValue{BoolValue: x != 0}
			}
		case typ == protowire.BytesType && (num == valueString || num == valueStruct || num == valueList):
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			if num != valueString && seenMessage {
				return nil, false
			}
			if !d.valueBytes(v, num, p, depth) {
				return nil, false
			}
			seenMessage = seenMessage || num != valueString
		default:
			return nil, false
		}
	}
	return v, true
}

// valueBytes sets a Value's string, struct or list kind.
func (d *decoder) valueBytes(v *structpb.Value, num protowire.Number, p []byte, depth int) bool {
	switch num {
	case valueString:
		s, ok := d.string(p)
		v.Kind = &structpb.Value_StringValue{StringValue: s}
		return ok
	case valueStruct:
		s, ok := d.structBody(p, depth+1)
		v.Kind = &structpb.Value_StructValue{StructValue: s}
		return ok
	}
	l := &structpb.ListValue{}
	for len(p) > 0 {
		f, rest, ok := next(p)
		if !ok || f.num != listValuesNumber || f.typ != protowire.BytesType {
			return false
		}
		p = rest
		e, ok := d.value(f.bytes, depth+1)
		if !ok {
			return false
		}
		l.Values = append(l.Values, e)
	}
	v.Kind = &structpb.Value_ListValue{ListValue: l}
	return true
}
