package envoysim

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// hostMetadataText renders an endpoint's filter_metadata the way Envoy 1.38
// renders a message-typed CEL attribute such as xds.upstream_host_metadata:
// protobuf TextFormat in single-line mode, map entries sorted by key, each
// field followed by one space (source/extensions/filters/common/expr/evaluator.cc,
// print, kMessage, runtime guard cel_message_serialize_text_format on by
// default, v1.38.0). v1.37.x printed ShortDebugString, whose output carries
// protobuf's debug-only marker, so it cannot be parsed reliably there.
func hostMetadataText(md map[string]*structpb.Struct) string {
	var b strings.Builder
	for _, ns := range slices.Sorted(mapKeys(md)) {
		b.WriteString("filter_metadata { key: ")
		b.WriteString(textString(ns))
		b.WriteString(" value { ")
		writeStruct(&b, md[ns])
		b.WriteString("} } ")
	}
	return b.String()
}

func writeStruct(b *strings.Builder, s *structpb.Struct) {
	for _, k := range slices.Sorted(mapKeys(s.GetFields())) {
		b.WriteString("fields { key: ")
		b.WriteString(textString(k))
		b.WriteString(" value { ")
		writeValue(b, s.GetFields()[k])
		b.WriteString("} } ")
	}
}

func writeValue(b *strings.Builder, v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		b.WriteString("string_value: " + textString(k.StringValue) + " ")
	case *structpb.Value_NumberValue:
		b.WriteString("number_value: " + strconv.FormatFloat(k.NumberValue, 'g', -1, 64) + " ")
	case *structpb.Value_BoolValue:
		b.WriteString("bool_value: " + strconv.FormatBool(k.BoolValue) + " ")
	case *structpb.Value_NullValue:
		b.WriteString("null_value: NULL_VALUE ")
	case *structpb.Value_StructValue:
		b.WriteString("struct_value { ")
		writeStruct(b, k.StructValue)
		b.WriteString("} ")
	case *structpb.Value_ListValue:
		b.WriteString("list_value { ")
		for _, e := range k.ListValue.GetValues() {
			b.WriteString("values { ")
			writeValue(b, e)
			b.WriteString("} ")
		}
		b.WriteString("} ")
	}
}

// textString quotes like TextFormat (CEscape) for the printable ASCII the
// sim's metadata uses; other bytes are octal-escaped.
func textString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20 || c >= 0x7f:
			b.WriteString("\\" + strconv.FormatInt(int64(c)|0o400, 8)[1:])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
