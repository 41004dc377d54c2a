package admit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// Refusal is a request the gateway answers itself with an error: OpenAI's
// status, error type and code, the message and the field it names.
// extproc renders it in the client's API shape (Anthropic's types and
// statuses under /v1/messages).
type Refusal struct {
	Status                     int
	Type, Code, Message, Param string
	// Retry sets a Retry-After of RetryAfter in whole seconds, rounded up,
	// at least 1.
	Retry      bool
	RetryAfter time.Duration
	// Headers follow Retry-After (x-ratelimit-*-tokens).
	Headers []Header
}

// Header is one header of a refusal.
type Header struct{ Key, Value string }

func (r *Refusal) withRetryAfter(d time.Duration) *Refusal {
	r.Retry, r.RetryAfter = true, d
	return r
}

// InvalidKey: no key, unknown key, revoked key (401).
func InvalidKey(msg string) *Refusal {
	return &Refusal{Status: http.StatusUnauthorized, Message: msg, Type: "invalid_request_error", Code: "invalid_api_key"}
}

// KeyRefused: a key the authenticator did not accept (401), with the
// reason's code: invalid_api_key (unknown), key_revoked, key_expired.
func KeyRefused(r subkey.Reason) *Refusal {
	msg := "Incorrect API key provided."
	switch r {
	case subkey.Revoked:
		msg = "This API key has been revoked."
	case subkey.Expired:
		msg = "This API key has expired."
	}
	return &Refusal{Status: http.StatusUnauthorized, Message: msg, Type: "invalid_request_error", Code: r.Code()}
}

// BadRequest is a 400 naming the field param.
func BadRequest(msg, code, param string) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Code: code, Param: param}
}

// ModelNotFound: an alias the config does not have (nothing else is listed).
func ModelNotFound(model string) *Refusal {
	return &Refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: "The model `" + model + "` does not exist or you do not have access to it."}
}

// TooLarge: a body (or content-length) above request.max_body_bytes.
func TooLarge(limit int64) *Refusal {
	return &Refusal{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: "Request body too large: the limit is " + strconv.FormatInt(limit, 10) + " bytes."}
}

// storeRetry is the Retry-After of a refusal because a store (Redis) did
// not answer: its client reconnects within that, and a client told nothing
// backs off on its own schedule (or, an agent, not at all).
const storeRetry = time.Second

// Unavailable: an accounting store did not answer and its failure mode is
// closed.
func Unavailable(what string) *Refusal {
	r := &Refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "accounting_unavailable",
		Message: "The gateway cannot check the " + what + " right now; retry later."}
	return r.withRetryAfter(storeRetry)
}

// KeysExhausted: capacity that comes back (keys rate limited, out of quota
// or busy) is a 429 with Retry-After, which SDKs back off on; keys that are
// failing are a 503.
func KeysExhausted(model string, retry time.Duration, failing bool) *Refusal {
	r := &Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "upstream_keys_exhausted",
		Message: "Every upstream key for `" + model + "` is rate limited or busy; retry after the indicated time."}
	if failing {
		r.Status, r.Type = http.StatusServiceUnavailable, "server_error"
		r.Message = "Every upstream key for `" + model + "` is failing; retry later."
	}
	return r.withRetryAfter(max(retry, time.Second))
}
