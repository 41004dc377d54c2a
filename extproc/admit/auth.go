package admit

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// Authenticator resolves a presented key to its tenant and virtual key:
// the config's keys, then the sub-keys minted at run time when they are
// on (subkey.Auth). It must not reach Redis: it runs for every request.
type Authenticator interface {
	Authenticate(cfg *config.Config, presented string) (config.KeyOwner, subkey.Reason)
}

// Authenticate is the auth step: the virtual key from Authorization:
// Bearer <key>, else x-api-key, resolved by keys. It sets f.Owner.
func Authenticate(cfg *config.Config, keys Authenticator, f *Facts, authorization, apiKey string) *Refusal {
	key := bearer(authorization)
	if key == "" {
		key = strings.TrimSpace(apiKey)
	}
	if key == "" {
		return InvalidKey("You didn't provide an API key. Provide it as Authorization: Bearer <key>.")
	}
	owner, reason := keys.Authenticate(cfg, key)
	if reason != subkey.OK {
		return KeyRefused(reason)
	}
	f.Owner = owner
	return nil
}

// bearer extracts the token of "Bearer <token>".
func bearer(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// Endpoint is the path step, after Authenticate: the path must be served
// with its method, and a declared body must fit request.max_body_bytes.
// local reports a request the gateway answers itself (the model list).
func Endpoint(cfg *config.Config, f *Facts, method, contentLength string, bodyless bool) (local bool, _ *Refusal) {
	switch {
	case f.Spec == nil:
		return false, &Refusal{Status: http.StatusNotFound, Message: "Unknown request URL: " + method + " " + f.Path, Type: "invalid_request_error", Code: "unknown_url"}
	case method != f.Spec.Method:
		return false, &Refusal{Status: http.StatusMethodNotAllowed, Message: "Use " + f.Spec.Method + " for " + f.Path, Type: "invalid_request_error", Code: "method_not_allowed"}
	case f.Spec.Local:
		return true, nil
	}
	limit := int64(cfg.Request.MaxBodyBytes)
	if n, err := strconv.ParseInt(contentLength, 10, 64); err == nil && n > limit {
		return false, TooLarge(limit)
	}
	if bodyless {
		return false, BadRequest("The request has no body; send a JSON object.", "invalid_json", "")
	}
	return false, nil
}
