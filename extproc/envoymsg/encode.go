package envoymsg

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The answers the data path sends (headers and body responses with header
// and body mutations, dynamic metadata) are encoded by hand: protobuf-go
// walks each of the dozen or so small messages of an answer through its
// generic table-driven coder twice (size, then marshal), which cost more
// than the rest of a JSON request's handling. The encoder writes fields in
// field-number order, as protobuf-go does, so the bytes are the same
// (TestEncodeMatchesProto); anything it does not know goes to protobuf-go.

// Field numbers (envoy/service/ext_proc/v3/external_processor.proto,
// envoy/config/core/v3/base.proto).
const (
	fRespRequestHeaders  protowire.Number = 1
	fRespResponseHeaders protowire.Number = 2
	fRespRequestBody     protowire.Number = 3
	fRespResponseBody    protowire.Number = 4

	fCommonStatus     protowire.Number = 1
	fCommonHeaderMut  protowire.Number = 2
	fCommonBodyMut    protowire.Number = 3
	fCommonClearRoute protowire.Number = 5

	fMutSet    protowire.Number = 1
	fMutRemove protowire.Number = 2

	fBodyMutBody protowire.Number = 1

	fHVOHeader       protowire.Number = 1
	fHVOAppendAction protowire.Number = 3
	fHVOKeepEmpty    protowire.Number = 4

	fHVKey      protowire.Number = 1
	fHVValue    protowire.Number = 2
	fHVRawValue protowire.Number = 3
)

// encodable reports whether appendResponse handles r.
func encodable(r *extprocv3.ProcessingResponse) bool {
	if r.ModeOverride != nil || r.OverrideMessageTimeout != nil || r.RequestDrain || len(r.TypedDynamicMetadata) > 0 ||
		len(r.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	var c *extprocv3.CommonResponse
	switch v := r.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		c = v.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		c = v.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		c = v.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		c = v.ResponseBody.GetResponse()
	case nil:
	default:
		return false
	}
	if c == nil {
		return true
	}
	if c.Trailers != nil {
		return false
	}
	if bm := c.BodyMutation; bm != nil {
		if _, ok := bm.Mutation.(*extprocv3.BodyMutation_Body); !ok {
			return false
		}
	}
	// proto3 strings must be UTF-8; leave the error to protobuf-go.
	for _, o := range c.GetHeaderMutation().GetSetHeaders() {
		if o == nil || o.Append != nil || !utf8.ValidString(o.GetHeader().GetKey()) || !utf8.ValidString(o.GetHeader().GetValue()) {
			return false
		}
	}
	for _, h := range c.GetHeaderMutation().GetRemoveHeaders() {
		if !utf8.ValidString(h) {
			return false
		}
	}
	return true
}

// answerSizes are the nested lengths of one answer, computed once.
type answerSizes struct {
	num                  protowire.Number // oneof field; 0: none
	wrapper, common, mut int
	total                int
}

// sizeResponse sizes r without its dynamic metadata.
func sizeResponse(r *extprocv3.ProcessingResponse) answerSizes {
	var z answerSizes
	num, c := responseOneof(r)
	if num == 0 {
		return z
	}
	z.num = num
	if c != nil {
		if m := c.HeaderMutation; m != nil {
			z.mut = mutationSize(m)
		}
		z.common = commonSize(c, z.mut)
		z.wrapper = protowire.SizeTag(1) + protowire.SizeBytes(z.common)
	}
	z.total = protowire.SizeTag(num) + protowire.SizeBytes(z.wrapper)
	return z
}

// responseOneof returns the oneof's field number and its CommonResponse
// (nil when the HeadersResponse/BodyResponse is empty).
func responseOneof(r *extprocv3.ProcessingResponse) (protowire.Number, *extprocv3.CommonResponse) {
	switch v := r.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return fRespRequestHeaders, v.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return fRespResponseHeaders, v.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return fRespRequestBody, v.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return fRespResponseBody, v.ResponseBody.GetResponse()
	}
	return 0, nil
}

// commonSize is CommonResponse's size given its header mutation's.
func commonSize(c *extprocv3.CommonResponse, mut int) int {
	n := 0
	if c.Status != 0 {
		n += protowire.SizeTag(fCommonStatus) + protowire.SizeVarint(uint64(c.Status))
	}
	if c.HeaderMutation != nil {
		n += protowire.SizeTag(fCommonHeaderMut) + protowire.SizeBytes(mut)
	}
	if bm := c.BodyMutation; bm != nil {
		n += protowire.SizeTag(fCommonBodyMut) + protowire.SizeBytes(bodyMutationSize(bm))
	}
	if c.ClearRouteCache {
		n += protowire.SizeTag(fCommonClearRoute) + 1
	}
	return n
}

func bodyMutationSize(bm *extprocv3.BodyMutation) int {
	b := bm.Mutation.(*extprocv3.BodyMutation_Body).Body
	return protowire.SizeTag(fBodyMutBody) + protowire.SizeBytes(len(b))
}

func mutationSize(m *extprocv3.HeaderMutation) int {
	n := 0
	for _, o := range m.SetHeaders {
		n += protowire.SizeTag(fMutSet) + protowire.SizeBytes(optionSize(o))
	}
	for _, h := range m.RemoveHeaders {
		n += protowire.SizeTag(fMutRemove) + protowire.SizeBytes(len(h))
	}
	return n
}

func optionSize(o *corev3.HeaderValueOption) int {
	n := 0
	if h := o.Header; h != nil {
		n += protowire.SizeTag(fHVOHeader) + protowire.SizeBytes(headerValueSize(h))
	}
	if o.AppendAction != 0 {
		n += protowire.SizeTag(fHVOAppendAction) + protowire.SizeVarint(uint64(o.AppendAction))
	}
	if o.KeepEmptyValue {
		n += protowire.SizeTag(fHVOKeepEmpty) + 1
	}
	return n
}

func headerValueSize(h *corev3.HeaderValue) int {
	n := 0
	if h.Key != "" {
		n += protowire.SizeTag(fHVKey) + protowire.SizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += protowire.SizeTag(fHVValue) + protowire.SizeBytes(len(h.Value))
	}
	if len(h.RawValue) > 0 {
		n += protowire.SizeTag(fHVRawValue) + protowire.SizeBytes(len(h.RawValue))
	}
	return n
}

// appendResponse appends r without its dynamic metadata; z is
// sizeResponse(r).
func appendResponse(b []byte, r *extprocv3.ProcessingResponse, z answerSizes) []byte {
	_, c := responseOneof(r)
	if z.num == 0 {
		return b
	}
	b = protowire.AppendTag(b, z.num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(z.wrapper))
	if c == nil {
		return b
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(z.common))
	if c.Status != 0 {
		b = protowire.AppendTag(b, fCommonStatus, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(c.Status))
	}
	if m := c.HeaderMutation; m != nil {
		b = protowire.AppendTag(b, fCommonHeaderMut, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(z.mut))
		for _, o := range m.SetHeaders {
			b = protowire.AppendTag(b, fMutSet, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(optionSize(o)))
			b = appendOption(b, o)
		}
		for _, h := range m.RemoveHeaders {
			b = protowire.AppendTag(b, fMutRemove, protowire.BytesType)
			b = protowire.AppendString(b, h)
		}
	}
	if bm := c.BodyMutation; bm != nil {
		b = protowire.AppendTag(b, fCommonBodyMut, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(bodyMutationSize(bm)))
		b = protowire.AppendTag(b, fBodyMutBody, protowire.BytesType)
		b = protowire.AppendBytes(b, bm.Mutation.(*extprocv3.BodyMutation_Body).Body)
	}
	if c.ClearRouteCache {
		b = protowire.AppendTag(b, fCommonClearRoute, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

func appendOption(b []byte, o *corev3.HeaderValueOption) []byte {
	if h := o.Header; h != nil {
		b = protowire.AppendTag(b, fHVOHeader, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerValueSize(h)))
		if h.Key != "" {
			b = protowire.AppendTag(b, fHVKey, protowire.BytesType)
			b = protowire.AppendString(b, h.Key)
		}
		if h.Value != "" {
			b = protowire.AppendTag(b, fHVValue, protowire.BytesType)
			b = protowire.AppendString(b, h.Value)
		}
		if len(h.RawValue) > 0 {
			b = protowire.AppendTag(b, fHVRawValue, protowire.BytesType)
			b = protowire.AppendBytes(b, h.RawValue)
		}
	}
	if o.AppendAction != 0 {
		b = protowire.AppendTag(b, fHVOAppendAction, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(o.AppendAction))
	}
	if o.KeepEmptyValue {
		b = protowire.AppendTag(b, fHVOKeepEmpty, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}
