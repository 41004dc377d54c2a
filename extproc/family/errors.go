package family

import (
	"net/http"
	"strconv"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// ErrorShape is how a family writes an error body.
type ErrorShape uint8

const (
	// OpenAI: {"error":{"message","type","param","code"}} (openai-go's
	// *openai.Error), with the status the gateway chose.
	OpenAI ErrorShape = iota
	// Anthropic: {"type":"error","error":{"type","message"}} with the
	// statuses Anthropic uses (https://docs.anthropic.com/en/api/errors):
	// 400 invalid_request_error, 401 authentication_error, 402
	// billing_error, 403 permission_error, 404 not_found_error, 413
	// request_too_large, 429 rate_limit_error, 500 api_error, 504
	// timeout_error, 529 overloaded_error.
	Anthropic
)

// Error is a refusal before it is written in a family's shape.
type Error struct {
	Status  int
	Message string
	Type    string // OpenAI "type"
	Code    string // OpenAI "code", the gateway's reason
	Param   string
	// WithCode writes Code into Anthropic's error object as well (the
	// gateway's key refusals: a client tells key_revoked from an unknown
	// key by it); without it Anthropic's shape has its two members only.
	WithCode bool
}

// StatusOverloaded is Anthropic's 529.
const StatusOverloaded = 529

// Render returns the status and body of e in the shape.
func (sh ErrorShape) Render(e *Error) (int, []byte) {
	if sh == Anthropic {
		st, typ := anthropicStatus(e)
		b := make([]byte, 0, 64+len(e.Message))
		b = append(b, `{"type":"error","error":{"type":`...)
		b = strconv.AppendQuote(b, typ)
		b = append(b, `,"message":`...)
		b = jsonstr.Append(b, e.Message)
		if e.WithCode && e.Code != "" {
			b = append(b, `,"code":`...)
			b = jsonstr.Append(b, e.Code)
		}
		return st, append(b, "}}"...)
	}
	b := make([]byte, 0, 96+len(e.Message))
	b = append(b, `{"error":{"message":`...)
	b = jsonstr.Append(b, e.Message)
	b = append(b, `,"type":`...)
	b = jsonstr.Append(b, e.Type)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.Param)
	}
	b = append(b, `,"code":`...)
	if e.Code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.Code)
	}
	return e.Status, append(b, "}}"...)
}

// anthropicStatus maps the gateway's status and reason to Anthropic's.
// A hard-capped budget, the tenant's or a key's, is billing (402, not
// retried: it will not come back within a retry); unavailable capacity is overloaded (529, which the
// Anthropic SDKs retry with back-off like 429).
func anthropicStatus(e *Error) (int, string) {
	switch {
	case e.Code == "budget_exceeded", e.Code == "key_budget_exceeded":
		return http.StatusPaymentRequired, "billing_error"
	case e.Status == http.StatusBadRequest, e.Status == http.StatusMethodNotAllowed:
		return http.StatusBadRequest, "invalid_request_error"
	case e.Status == http.StatusUnauthorized:
		return http.StatusUnauthorized, "authentication_error"
	case e.Status == http.StatusForbidden:
		return http.StatusForbidden, "permission_error"
	case e.Status == http.StatusNotFound:
		return http.StatusNotFound, "not_found_error"
	case e.Status == http.StatusRequestEntityTooLarge:
		return http.StatusRequestEntityTooLarge, "request_too_large"
	case e.Status == http.StatusTooManyRequests:
		return http.StatusTooManyRequests, "rate_limit_error"
	case e.Status == http.StatusGatewayTimeout:
		return http.StatusGatewayTimeout, "timeout_error"
	case e.Status == http.StatusServiceUnavailable, e.Status == StatusOverloaded:
		return StatusOverloaded, "overloaded_error"
	}
	return http.StatusInternalServerError, "api_error"
}
