package envoymsg

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Codec is grpc-go's protobuf codec with shortcuts for the ext_proc
// service: Envoy's requests are decoded by hand (decode.go), and for its
// answers the shapes the data path sends (encode.go) and a
// ProcessingResponse's dynamic_metadata (a google.protobuf.Struct, i.e.
// maps of Values, which protobuf-go marshals through reflection) are
// encoded by hand. Under load, encoding the answers cost protobuf-go about
// 19 us per JSON request, more than handling them. The bytes are the same
// protobuf (only map order may differ, which protobuf leaves unspecified).
// Everything else goes to the default codec.
type Codec struct{ base encoding.CodecV2 }

// NewCodec returns the codec; install it with grpc.ForceServerCodecV2 (see
// GRPCServerOptions).
func NewCodec() *Codec { return &Codec{base: encoding.GetCodecV2(grpcproto.Name)} }

// Name is the content-subtype, the same as the default codec's.
func (c *Codec) Name() string { return grpcproto.Name }

// Unmarshal decodes an Envoy ProcessingRequest by hand (decode.go) when it
// has the shape Envoy sends, and everything else with the default codec.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*extprocv3.ProcessingRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	// An owned copy: the request's strings and bytes share it, and gRPC
	// reuses data's buffers once Unmarshal returns.
	buf := data.Materialize()
	if decodeRequest(buf, r) {
		return nil
	}
	proto.Reset(r)
	if err := proto.Unmarshal(buf, r); err != nil {
		return fmt.Errorf("extproc: unmarshal request: %w", err)
	}
	return nil
}

// dynamicMetadataField is ProcessingResponse.dynamic_metadata's number.
var dynamicMetadataField = protowire.Number((&extprocv3.ProcessingResponse{}).ProtoReflect().Descriptor().Fields().ByName("dynamic_metadata").Number())

// Marshal encodes v; see Codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*extprocv3.ProcessingResponse)
	if !ok {
		return c.base.Marshal(v)
	}
	md := r.DynamicMetadata
	if md != nil && !validUTF8(md) {
		return nil, errors.New("extproc: marshal response: dynamic_metadata: string field contains invalid UTF-8")
	}
	hand := encodable(r)
	if !hand && md == nil {
		return c.base.Marshal(v)
	}
	var rest int
	var z answerSizes
	if hand {
		z = sizeResponse(r)
		rest = z.total
	} else {
		// The response belongs to the sending goroutine until Send
		// returns, so it may be lent without its metadata for the call.
		r.DynamicMetadata = nil
		defer func() { r.DynamicMetadata = md }()
		// Size without the cache (the reused per-stream answers change
		// between Sends), then marshal with the sizes it just cached.
		rest = proto.Size(r)
	}
	mdSize := 0
	if md != nil {
		mdSize = structSize(md)
	}
	size := rest
	if md != nil {
		size += protowire.SizeTag(dynamicMetadataField) + protowire.SizeBytes(mdSize)
	}
	var b []byte
	var buf *[]byte
	pool := mem.DefaultBufferPool()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b = make([]byte, 0, size)
	} else {
		buf = pool.Get(size)
		b = (*buf)[:0]
	}
	if hand {
		b = appendResponse(b, r, z)
	} else {
		var err error
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, r); err != nil {
			if buf != nil {
				pool.Put(buf)
			}
			return nil, fmt.Errorf("extproc: marshal response: %w", err)
		}
	}
	if md != nil {
		b = protowire.AppendTag(b, dynamicMetadataField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mdSize))
		b = appendStruct(b, md)
	}
	if buf == nil {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

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

// validUTF8 holds the default codec's rule: proto3 strings are UTF-8.
func validUTF8(s *structpb.Struct) bool {
	for k, v := range s.GetFields() {
		if !utf8.ValidString(k) || !validValueUTF8(v) {
			return false
		}
	}
	return true
}

func validValueUTF8(v *structpb.Value) bool {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return utf8.ValidString(k.StringValue)
	case *structpb.Value_StructValue:
		return validUTF8(k.StructValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if !validValueUTF8(e) {
				return false
			}
		}
	}
	return true
}

func structSize(s *structpb.Struct) int {
	n := 0
	for k, v := range s.GetFields() {
		e := entrySize(k, v)
		n += protowire.SizeTag(structFields) + protowire.SizeBytes(e)
	}
	return n
}

func entrySize(k string, v *structpb.Value) int {
	// Key and value are always written, as protobuf-go writes map entries.
	return protowire.SizeTag(entryKey) + protowire.SizeBytes(len(k)) + protowire.SizeTag(entryValue) + protowire.SizeBytes(valueSize(v))
}

func valueSize(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return protowire.SizeTag(valueNull) + protowire.SizeVarint(uint64(k.NullValue))
	case *structpb.Value_NumberValue:
		return protowire.SizeTag(valueNumber) + protowire.SizeFixed64()
	case *structpb.Value_StringValue:
		return protowire.SizeTag(valueString) + protowire.SizeBytes(len(k.StringValue))
	case *structpb.Value_BoolValue:
		return protowire.SizeTag(valueBool) + 1
	case *structpb.Value_StructValue:
		return protowire.SizeTag(valueStruct) + protowire.SizeBytes(structSize(k.StructValue))
	case *structpb.Value_ListValue:
		return protowire.SizeTag(valueList) + protowire.SizeBytes(listSize(k.ListValue))
	}
	return 0
}

func listSize(l *structpb.ListValue) int {
	n := 0
	for _, v := range l.GetValues() {
		n += protowire.SizeTag(listValuesNumber) + protowire.SizeBytes(valueSize(v))
	}
	return n
}

func appendStruct(b []byte, s *structpb.Struct) []byte {
	for k, v := range s.GetFields() {
		b = protowire.AppendTag(b, structFields, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(k, v)))
		b = protowire.AppendTag(b, entryKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, entryValue, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(valueSize(v)))
		b = appendValue(b, v)
	}
	return b
}

func appendValue(b []byte, v *structpb.Value) []byte {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		b = protowire.AppendTag(b, valueNull, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(k.NullValue))
	case *structpb.Value_NumberValue:
		b = protowire.AppendTag(b, valueNumber, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(k.NumberValue))
	case *structpb.Value_StringValue:
		b = protowire.AppendTag(b, valueString, protowire.BytesType)
		return protowire.AppendString(b, k.StringValue)
	case *structpb.Value_BoolValue:
		b = protowire.AppendTag(b, valueBool, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(k.BoolValue))
	case *structpb.Value_StructValue:
		b = protowire.AppendTag(b, valueStruct, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(structSize(k.StructValue)))
		return appendStruct(b, k.StructValue)
	case *structpb.Value_ListValue:
		b = protowire.AppendTag(b, valueList, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(listSize(k.ListValue)))
		for _, e := range k.ListValue.GetValues() {
			b = protowire.AppendTag(b, listValuesNumber, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(valueSize(e)))
			b = appendValue(b, e)
		}
	}
	return b
}
