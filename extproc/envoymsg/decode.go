package envoymsg

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// Decoding Envoy's messages by hand. protobuf-go decodes a request-headers
// message of 15 headers into about 50 allocations (a HeaderValue, a key
// string and a value slice per header) through its table-driven reflection;
// under load that was the ext_proc server's largest single cost, as large
// as the do-nothing server's whole handling. decodeRequest decodes the
// shapes Envoy sends (headers, bodies, trailers; metadata, attributes and
// protocol config through protobuf-go) with a handful of allocations: the
// message is copied once, strings are substrings of one string copy of it,
// bytes fields share the copy, and a HeaderMap's values live in one slab.
// Anything else — an unknown field (a newer Envoy's), a field repeated
// (protobuf merges those), a wrong wire type, a string that is not UTF-8 —
// makes it return false, and the codec decodes with protobuf-go, the
// reference (FuzzDecodeRequest holds the two equal). Attributes and the
// metadata context are google.protobuf.Struct values, decoded here too:
// per string field protobuf-go allocates the key, the Value, its kind and
// the string; here only the Value and its kind.

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// Field numbers, read from the generated descriptors.
var (
	reqRequestHeaders   = fieldNumber(&extprocv3.ProcessingRequest{}, "request_headers")
	reqResponseHeaders  = fieldNumber(&extprocv3.ProcessingRequest{}, "response_headers")
	reqRequestBody      = fieldNumber(&extprocv3.ProcessingRequest{}, "request_body")
	reqResponseBody     = fieldNumber(&extprocv3.ProcessingRequest{}, "response_body")
	reqRequestTrailers  = fieldNumber(&extprocv3.ProcessingRequest{}, "request_trailers")
	reqResponseTrailers = fieldNumber(&extprocv3.ProcessingRequest{}, "response_trailers")
	reqMetadataContext  = fieldNumber(&extprocv3.ProcessingRequest{}, "metadata_context")
	reqAttributes       = fieldNumber(&extprocv3.ProcessingRequest{}, "attributes")
	reqObservability    = fieldNumber(&extprocv3.ProcessingRequest{}, "observability_mode")
	reqProtocolConfig   = fieldNumber(&extprocv3.ProcessingRequest{}, "protocol_config")

	headersHeaders     = fieldNumber(&extprocv3.HttpHeaders{}, "headers")
	headersAttributes  = fieldNumber(&extprocv3.HttpHeaders{}, "attributes")
	headersEndOfStream = fieldNumber(&extprocv3.HttpHeaders{}, "end_of_stream")

	bodyBody              = fieldNumber(&extprocv3.HttpBody{}, "body")
	bodyEndOfStream       = fieldNumber(&extprocv3.HttpBody{}, "end_of_stream")
	bodyEndWithoutMessage = fieldNumber(&extprocv3.HttpBody{}, "end_of_stream_without_message")
	bodyGRPCCompressed    = fieldNumber(&extprocv3.HttpBody{}, "grpc_message_compressed")
	bodyDrainComplete     = fieldNumber(&extprocv3.HttpBody{}, "drain_complete")

	trailersTrailers = fieldNumber(&extprocv3.HttpTrailers{}, "trailers")
	mapHeaders       = fieldNumber(&corev3.HeaderMap{}, "headers")
	valueKey         = fieldNumber(&corev3.HeaderValue{}, "key")
	valueValue       = fieldNumber(&corev3.HeaderValue{}, "value")
	valueRaw         = fieldNumber(&corev3.HeaderValue{}, "raw_value")
)

// decoder holds the owned copy of one message.
type decoder struct {
	buf []byte
	str string // string(buf), made on the first string field
}

// field is one field read from the wire: its number and type, and its
// payload (bytes) or value (varint).
type field struct {
	num   protowire.Number
	typ   protowire.Type
	bytes []byte
	value uint64
}

// next reads the field at the start of b and returns the rest; ok is false
// on a malformed field or a wire type the messages here do not use.
func next(b []byte) (f field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return f, nil, false
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(b)
	case protowire.VarintType:
		f.value, n = protowire.ConsumeVarint(b)
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, b[n:], true
}

// string returns v, a subslice of d.buf, as a string sharing one copy of
// the message; ok is false when it is not UTF-8 (protobuf-go's proto3 rule).
func (d *decoder) string(v []byte) (string, bool) {
	if len(v) == 0 {
		return "", true
	}
	if d.str == "" {
		d.str = string(d.buf)
	}
	off := cap(d.buf) - cap(v)
	s := d.str[off : off+len(v)]
	return s, utf8.ValidString(s)
}

// bytesField is protobuf-go's proto3 bytes: empty decodes to nil. Its
// capacity ends with it, so an append to one field reallocates instead of
// writing over the next field in the shared copy.
func bytesField(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

// decodeRequest decodes buf, which r may keep (strings and bytes share it),
// into r; false means "decode with protobuf-go" and leaves r partly set.
func decodeRequest(buf []byte, r *extprocv3.ProcessingRequest) bool {
	d := &decoder{buf: buf}
	var seen uint64
	for b := buf; len(b) > 0; {
		f, rest, ok := next(b)
		if !ok || f.num >= 64 {
			return false
		}
		b = rest
		if f.num != reqAttributes {
			if seen&(1<<f.num) != 0 {
				return false // a repeated message is merged: protobuf-go's job
			}
			seen |= 1 << f.num
		}
		if !d.requestField(r, f) {
			return false
		}
	}
	return true
}

// requestField sets one field of a ProcessingRequest.
func (d *decoder) requestField(r *extprocv3.ProcessingRequest, f field) bool {
	if f.typ == protowire.VarintType {
		if f.num != reqObservability {
			return false
		}
		r.ObservabilityMode = f.value != 0
		return true
	}
	switch f.num {
	case reqRequestHeaders, reqResponseHeaders:
		h, ok := d.httpHeaders(f.bytes)
		if !ok {
			return false
		}
		if f.num == reqRequestHeaders {
			r.Request = &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}
		} else {
			r.Request = &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}
		}
	case reqRequestBody, reqResponseBody:
		body, ok := d.httpBody(f.bytes)
		if !ok {
			return false
		}
		if f.num == reqRequestBody {
			r.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: body}
		} else {
			r.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: body}
		}
	case reqRequestTrailers, reqResponseTrailers:
		t, ok := d.httpTrailers(f.bytes)
		if !ok {
			return false
		}
		if f.num == reqRequestTrailers {
			r.Request = &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: t}
		} else {
			r.Request = &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: t}
		}
	case reqMetadataContext:
		if m, ok := d.metadata(f.bytes); ok {
			r.MetadataContext = m
			return true
		}
		r.MetadataContext = new(corev3.Metadata)
		return proto.Unmarshal(f.bytes, r.MetadataContext) == nil
	case reqProtocolConfig:
		r.ProtocolConfig = new(extprocv3.ProtocolConfiguration)
		return proto.Unmarshal(f.bytes, r.ProtocolConfig) == nil
	case reqAttributes:
		return d.structEntry(f.bytes, &r.Attributes)
	default:
		return false
	}
	return true
}

func (d *decoder) httpHeaders(b []byte) (*extprocv3.HttpHeaders, bool) {
	h := new(extprocv3.HttpHeaders)
	var seenHeaders bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case f.num == headersHeaders && f.typ == protowire.BytesType && !seenHeaders:
			seenHeaders = true
			if h.Headers, ok = d.headerMap(f.bytes); !ok {
				return nil, false
			}
		case f.num == headersAttributes && f.typ == protowire.BytesType:
			if !d.structEntry(f.bytes, &h.Attributes) {
				return nil, false
			}
		case f.num == headersEndOfStream && f.typ == protowire.VarintType:
			h.EndOfStream = f.value != 0
		default:
			return nil, false
		}
	}
	return h, true
}

func (d *decoder) httpBody(b []byte) (*extprocv3.HttpBody, bool) {
	body := new(extprocv3.HttpBody)
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok {
			return nil, false
		}
		b = rest
		if f.num == bodyBody && f.typ == protowire.BytesType {
			body.Body = bytesField(f.bytes)
			continue
		}
		if f.typ != protowire.VarintType {
			return nil, false
		}
		switch f.num {
		case bodyEndOfStream:
			body.EndOfStream = f.value != 0
		case bodyEndWithoutMessage:
			body.EndOfStreamWithoutMessage = f.value != 0
		case bodyGRPCCompressed:
			body.GrpcMessageCompressed = f.value != 0
		case bodyDrainComplete:
			body.DrainComplete = f.value != 0
		default:
			return nil, false
		}
	}
	return body, true
}

func (d *decoder) httpTrailers(b []byte) (*extprocv3.HttpTrailers, bool) {
	t := new(extprocv3.HttpTrailers)
	var seen bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num != trailersTrailers || f.typ != protowire.BytesType || seen {
			return nil, false
		}
		b, seen = rest, true
		if t.Trailers, ok = d.headerMap(f.bytes); !ok {
			return nil, false
		}
	}
	return t, true
}

// headerMap decodes a HeaderMap: its values in one slab, counted first.
func (d *decoder) headerMap(b []byte) (*corev3.HeaderMap, bool) {
	n := 0
	for c := b; len(c) > 0; n++ {
		f, rest, ok := next(c)
		if !ok || f.num != mapHeaders || f.typ != protowire.BytesType {
			return nil, false
		}
		c = rest
	}
	m := &corev3.HeaderMap{}
	if n == 0 {
		return m, true
	}
	slab := make([]corev3.HeaderValue, n)
	m.Headers = make([]*corev3.HeaderValue, n)
	for i := range n {
		f, rest, _ := next(b)
		b = rest
		if !d.headerValue(f.bytes, &slab[i]) {
			return nil, false
		}
		m.Headers[i] = &slab[i]
	}
	return m, true
}

// headerValue decodes one header; a field given twice keeps the last, as
// protobuf does for scalars.
func (d *decoder) headerValue(b []byte, hv *corev3.HeaderValue) bool {
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.typ != protowire.BytesType {
			return false
		}
		b = rest
		switch f.num {
		case valueKey:
			hv.Key, ok = d.string(f.bytes)
		case valueValue:
			hv.Value, ok = d.string(f.bytes)
		case valueRaw:
			hv.RawValue = bytesField(f.bytes)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// structEntry decodes one entry of a map<string, Struct> into *m. As in
// protobuf-go, a missing value is an empty Struct and a later entry with
// the same key replaces the earlier one.
func (d *decoder) structEntry(b []byte, m *map[string]*structpb.Struct) bool {
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
		case f.num == 1 && !seenKey:
			seenKey = true
			if key, ok = d.string(f.bytes); !ok {
				return false
			}
		case f.num == 2 && !seenVal:
			seenVal, val = true, f.bytes
		default:
			return false
		}
	}
	s, ok := d.structBody(val, 0)
	if !ok {
		return false
	}
	if *m == nil {
		*m = make(map[string]*structpb.Struct, 1)
	}
	(*m)[key] = s
	return true
}
