package extproc

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
// The router-level filter records each response's owner from the attempt
// tags (x-swarmgate-backend / -upstream-key) and looks it up on a
// follow-up: the request is routed to that backend's cluster only
// (contract.Pool with Backend) and the key travels in the signed
// admission, so the upstream filter picks exactly that key or refuses.

const paramPreviousResponse = "previous_response_id"

// responseIDOK accepts an id worth recording or looking up: at most 256
// visible ASCII bytes without quotes or backslashes (a provider's ids are
// plain; anything else is not worth a Redis key).
func responseIDOK(id []byte) bool {
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
func (s *Server) previousOwner(ctx context.Context, r *routerStream, id string, model *config.Model) (ResponseOwner, *apiError) {
	if s.opts.Affinity == nil {
		return ResponseOwner{}, errBadRequest("previous_response_id is not supported through this gateway: send the conversation as input items.",
			"unsupported_parameter", paramPreviousResponse)
	}
	if !responseIDOK([]byte(id)) {
		return ResponseOwner{}, errUnknownResponse(id)
	}
	o, err := s.opts.Affinity.Owner(ctx, id)
	switch {
	case errors.Is(err, ErrUnknownResponse), err == nil && o.Tenant != r.owner.Tenant.Name:
		// Another tenant's response is answered exactly like an unknown
		// one: its provider key would serve that conversation's stored
		// context to whoever names its id.
		return ResponseOwner{}, errUnknownResponse(id)
	case err != nil:
		s.metrics.accountingErr.WithLabelValues("affinity").Inc()
		s.log.Warn("previous_response_id lookup failed; refusing", "err", err)
		return o, &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "affinity_unavailable", param: paramPreviousResponse,
			message: "The gateway cannot look up previous_response_id right now; retry later."}
	}
	for _, t := range model.Targets {
		if b, ok := r.cfg.Backend(t.Backend); ok && t.Backend == o.Backend && b.Serves(r.spec.Name) && t.Weight > 0 {
			return o, nil
		}
	}
	return o, &apiError{status: http.StatusConflict, typ: "invalid_request_error", code: "previous_response_unavailable", param: paramPreviousResponse,
		message: "The response named by previous_response_id was created on a backend that no longer serves `" + model.Name + "`."}
}

func errUnknownResponse(id string) *apiError {
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return errBadRequest("Previous response with id '"+id+"' not found.", "previous_response_not_found", paramPreviousResponse)
}

// errPinnedKey is the upstream filter's refusal when the key (or backend)
// that created the previous response cannot take this attempt: never
// another key, whose organisation does not hold the response.
func errPinnedKey(model string, err error, wrongBackend bool) *apiError {
	if wrongBackend {
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "previous_response_unavailable", param: paramPreviousResponse,
			message: "This attempt for `" + model + "` reached another backend than the one holding previous_response_id; retry later."}
	}
	retry := time.Second
	if nk := (*NoKeyError)(nil); errors.As(err, &nk) {
		retry = max(nk.RetryAfter, time.Second)
	}
	return (&apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "previous_response_key_unavailable", param: paramPreviousResponse,
		message: "The upstream key holding previous_response_id for `" + model + "` is rate limited, busy or failing; retry after the indicated time."}).withRetryAfter(retry)
}

// rememberResponse records who created the response a Responses request
// got (its id from the JSON body or the stream); never blocks.
func (s *Server) rememberResponse(r *routerStream) {
	if s.opts.Affinity == nil || r.backend == "" || r.upstreamKey == "" {
		return
	}
	var id []byte
	switch {
	case r.kind == bodyJSON && !r.jsonOverflow:
		id, _ = s.opts.Usage.ResponseID(r.jsonBuf)
	case r.kind == bodySSE && r.parser != nil:
		id = r.parser.ResponseID()
	}
	if responseIDOK(id) {
		s.opts.Affinity.Remember(string(id), ResponseOwner{Backend: r.backend, KeyID: r.upstreamKey, Tenant: r.owner.Tenant.Name},
			r.cfg.Request.ResponseAffinityTTL.D())
	}
}
