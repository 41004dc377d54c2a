package admit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// A Responses API response lives with the backend and key (organisation)
// that created it: a request naming it as previous_response_id must reach
// that key, or the provider answers 404 after the gateway admitted it.
// Scan looks the owner up (Owners) and pins the request to it: the route
// is that backend's cluster only and the key travels in the signed
// admission, so the upstream filter picks exactly that key or refuses.

// ParamPreviousResponse is the field refusals about it name.
const ParamPreviousResponse = "previous_response_id"

// ResponseIDOK accepts an id worth recording or looking up: at most 256
// visible ASCII bytes without quotes or backslashes (a provider's ids are
// plain; anything else is not worth a Redis key).
func ResponseIDOK(id []byte) bool {
	if len(id) == 0 || len(id) > 256 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// previousOwner resolves a request's previous_response_id to the backend
// and key that created it, or the refusal: 400 when unknown (or the
// gateway keeps no affinity), 503 when the store does not answer in time
// (the request cannot be routed safely, so it is not guessed), 409 when
// the owner's backend no longer serves the model.
func (a *Admitter) previousOwner(ctx context.Context, cfg *config.Config, f *Facts, id string, model *config.Model) (ResponseOwner, *Refusal) {
	if a.Owners == nil {
		return ResponseOwner{}, BadRequest("previous_response_id is not supported through this gateway: send the conversation as input items.",
			"unsupported_parameter", ParamPreviousResponse)
	}
	if !ResponseIDOK([]byte(id)) {
		return ResponseOwner{}, unknownResponse(id)
	}
	o, err := a.Owners.Owner(ctx, id)
	switch {
	case errors.Is(err, ErrUnknownResponse), err == nil && o.Tenant != f.Owner.Tenant.Name:
		// Another tenant's response is answered exactly like an unknown
		// one: its provider key would serve that conversation's stored
		// context to whoever names its id.
		return ResponseOwner{}, unknownResponse(id)
	case err != nil:
		a.failed("affinity")
		a.log().Warn("previous_response_id lookup failed; refusing", "err", err)
		r := &Refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "affinity_unavailable", Param: ParamPreviousResponse,
			Message: "The gateway cannot look up previous_response_id right now; retry later."}
		return o, r.withRetryAfter(storeRetry)
	}
	for _, t := range model.Targets {
		if b, ok := cfg.Backend(t.Backend); ok && t.Backend == o.Backend && b.Serves(f.Spec.Name) && t.Weight > 0 {
			return o, nil
		}
	}
	return o, &Refusal{Status: http.StatusConflict, Type: "invalid_request_error", Code: "previous_response_unavailable", Param: ParamPreviousResponse,
		Message: "The response named by previous_response_id was created on a backend that no longer serves `" + model.Name + "`."}
}

// PinnedKeyUnavailable: the key holding previous_response_id cannot take
// the request (rate limited, busy or failing), and no other key may: 429
// with Retry-After.
func PinnedKeyUnavailable(model string, retry time.Duration) *Refusal {
	return (&Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "previous_response_key_unavailable", Param: ParamPreviousResponse,
		Message: "The upstream key holding previous_response_id for `" + model + "` is rate limited, busy or failing; retry after the indicated time."}).withRetryAfter(max(retry, time.Second))
}

func unknownResponse(id string) *Refusal {
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return BadRequest("Previous response with id '"+id+"' not found.", "previous_response_not_found", ParamPreviousResponse)
}
