package extproc

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// headerAnthropicRequestID is where Anthropic's answers carry their id
// (its SDKs expose it as _request_id / RequestID).
const headerAnthropicRequestID = "request-id"

// requestIDHeader is the header that carries the gateway's request id on
// an answer in shape sh: x-request-id where OpenAI's SDKs read it,
// request-id where Anthropic's do. A provider's own id under that name is
// replaced: the gateway's id is the one its logs, traces and ledger know.
func requestIDHeader(sh family.ErrorShape) string {
	if sh == family.Anthropic {
		return headerAnthropicRequestID
	}
	return contract.HeaderRequestID
}

// setHeader is envoymsg.SetHeader (the answers translation.go builds).
func setHeader(k, v string) *corev3.HeaderValueOption { return envoymsg.SetHeader(k, v) }

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
