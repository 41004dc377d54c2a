package extproc

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// headerValue reads a header from Envoy's map: raw_value, else value (Envoy
// sends raw_value; other clients such as grpc-go's ext_proc send value).
func headerValue(h *corev3.HeaderValue) string {
	if rv := h.GetRawValue(); len(rv) > 0 {
		return string(rv)
	}
	return h.GetValue()
}

// isInternal reports whether a header name carries contract.HeaderPrefix.
// Envoy sends header names lower-cased.
func isInternal(k string) bool {
	return len(k) >= 12 && strings.EqualFold(k[:12], "x-swarmgate-")
}

// bearer extracts the token of "Bearer <token>".
func bearer(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}
