package extproc

import (
	"errors"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/extproc/admit"
)

// A Responses API response lives with the backend and key (organisation)
// that created it (extproc/admit pins a follow-up to them). The
// router-level filter records each response's owner from the attempt tags
// (x-swarmgate-backend / -upstream-key); the upstream filter picks exactly
// the pinned key or refuses.

// errPinnedKey is the upstream filter's refusal when the key (or backend)
// that created the previous response cannot take this attempt: never
// another key, whose organisation does not hold the response.
func errPinnedKey(model string, err error, wrongBackend bool) *apiError {
	if wrongBackend {
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "previous_response_unavailable", param: admit.ParamPreviousResponse,
			message: "This attempt for `" + model + "` reached another backend than the one holding previous_response_id; retry later."}
	}
	retry := time.Second
	if nk := (*NoKeyError)(nil); errors.As(err, &nk) {
		retry = nk.RetryAfter
	}
	return fromRefusal(admit.PinnedKeyUnavailable(model, retry))
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
	if admit.ResponseIDOK(id) {
		s.opts.Affinity.Remember(string(id), ResponseOwner{Backend: r.backend, KeyID: r.upstreamKey, Tenant: r.f.Tenant()},
			r.cfg.Request.ResponseAffinityTTL.D())
	}
}
