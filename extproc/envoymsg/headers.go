package envoymsg

import (
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// SetHeader overwrites a header. Values go in raw_value only: Envoy rejects
// a header with both value and raw_value
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/core/v3/base.proto#envoy-v3-api-msg-config-core-v3-headervalue).
// append_action is explicit because its default, APPEND_IF_EXISTS_OR_ADD,
// would add a second value.
func SetHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// HeaderValue reads a header from Envoy's map: raw_value, else value (Envoy
// sends raw_value; other clients such as grpc-go's ext_proc send value).
//
// The string shares raw_value's bytes instead of copying them: a request's
// headers were five of the fifteen allocations of a whole exchange. That
// holds because nothing writes a received message's bytes: Codec.Unmarshal
// gives each message its own copy (and so does protobuf-go), which then
// only lives as long as the strings read from it. Callers must not modify
// raw_value after reading it.
func HeaderValue(h *corev3.HeaderValue) string {
	if rv := h.GetRawValue(); len(rv) > 0 {
		return unsafe.String(&rv[0], len(rv))
	}
	return h.GetValue()
}
