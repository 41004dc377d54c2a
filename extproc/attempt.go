package extproc

import (
	"cmp"
	"context"
	"errors"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// upstreamHeaders prepares one attempt: the admission is verified, a key of
// the backend Envoy chose is picked, and the attempt's credential, static
// headers, path and body mode are set from the admission facts.
func (s *Server) upstreamHeaders(ctx context.Context, u *upstreamStream, req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	attrs := req.GetAttributes()
	if len(attrs) == 0 {
		attrs = h.GetAttributes()
	}
	backendName, upstreamModel := s.hosts.HostMetadata(attrs)
	attempt := envoymsg.AttemptCount(attrs)
	b, known := u.cfg.Backend(backendName)
	a := u.ans
	resp, _ := a.Start(envoymsg.RequestHeaders)
	hasLength := u.clearHeaders(h, a, b, known)
	ad, ok := s.attemptAdmission(u, req, h, backendName, attempt)
	if !ok {
		return localError(errNotAdmitted().in(family.ShapeForPath(pathOf(h))))
	}
	if !known {
		s.log.Warn("upstream attempt without a known backend in host metadata", "backend", backendName, "request_id", u.requestID)
		return localError(errNotAdmitted().in(u.shape))
	}
	u.backend = b
	tr, takes := translatorFor(b, family.ForPath(pathOnly(ad.path)))
	if !takes {
		// The request's cluster holds only backends that take its family
		// (internal/routing); a config change between admission and this
		// attempt can still leave one that does not.
		s.log.Warn("upstream attempt on a backend that does not take the request's API family", "backend", b.Name, "request_id", u.requestID)
		return localError(errNotAdmitted().in(u.shape))
	}
	if ad.key != "" && ad.backends != b.Name {
		// The request continues a response only one backend holds; Envoy
		// sent this attempt elsewhere (a retry in a cluster that holds
		// other backends too). No other backend's key may take it.
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		return localError(errPinnedKey(u.alias, nil, true).in(u.shape))
	}
	lease, refusal := s.pickKey(ctx, u, b, &ad, attempt)
	if refusal != nil {
		return refusal
	}
	setCredentials(a, b, lease, &ad)
	u.setTarget(a, resp, tr, &ad, upstreamModel, hasLength, h.GetEndOfStream())
	return resp
}

// clearHeaders removes from the attempt what it does not set itself. Every
// attempt works on the router's one request header map, which may already
// carry an earlier attempt's credential, static headers and :path for
// another backend (source/common/router/upstream_request.cc,
// UpstreamRequest::acceptHeadersFromRouter, Envoy 1.38). It reports
// whether the map has a content-length.
func (u *upstreamStream) clearHeaders(h *extprocv3.HttpHeaders, a *envoymsg.Answer, b *config.Backend, known bool) (hasLength bool) {
	for _, kv := range h.GetHeaders().GetHeaders() {
		k := kv.GetKey()
		switch {
		case k == "authorization" || k == "x-api-key" || k == "api-key":
			a.Remove(k)
		case isInternal(k):
			a.Remove(k) // no internal header leaves Envoy
		case k == "content-length":
			hasLength = true
		case u.cfg.StaticHeader(k) && (!known || !b.SetsHeader(k)):
			a.Remove(k) // another backend's static header
		}
	}
	return hasLength
}

// attemptAdmission reads and verifies the signed admission the attempt
// carries; ok is false (and counted) when there is none valid.
func (s *Server) attemptAdmission(u *upstreamStream, req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders, backend string, attempt int) (admitted, bool) {
	ad, scratch, ok := readAdmitted(req.GetMetadataContext().GetFilterMetadata()[contract.AdmissionNamespace], s.signer(u.cfg), s.opts.Now(), u.scratch)
	if cap(scratch) <= 64<<10 {
		u.scratch = scratch
	}
	if !ok {
		// No signed admission: the router-level filter did not admit this
		// request (it failed open, or the stream is not Envoy's). No key.
		s.metrics.unadmitted.Inc()
		s.log.Warn("upstream attempt without a valid admission identity; no key given", "backend", backend, "attempt", attempt)
		return ad, false
	}
	u.requestID, u.alias = ad.requestID, ad.model
	u.shape = family.ShapeForPath(pathOnly(ad.path))
	return ad, true
}

// pickKey picks the attempt's key, or answers it locally: no attempt
// leaves without a credential (from Envoy 1.36 an upstream filter's local
// reply goes to the client, not retried: UpstreamFilterManager::sendLocalReply,
// upstream_request.cc).
func (s *Server) pickKey(ctx context.Context, u *upstreamStream, b *config.Backend, ad *admitted, attempt int) (Lease, *extprocv3.ProcessingResponse) {
	// The key's TPM is charged what its provider counts at request time:
	// the prompt and the output it may write (OpenAI's limits take
	// max_tokens); keys have no stream-end top-up, so the prompt alone
	// let a key take several times its provider's TPM.
	pr := PickRequest{RequestID: u.requestID, Attempt: attempt, Sticky: ad.sticky, EstTokens: ad.estTokens + ad.maxTokens, Key: ad.key, Extend: u}
	lease, err := s.opts.Keys.Pick(ctx, b.Name, pr)
	if err != nil && ad.key != "" {
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		s.log.Warn("the key holding previous_response_id cannot take the attempt", "backend", b.Name, "key", ad.key, "request_id", u.requestID, "err", err)
		return lease, localError(errPinnedKey(u.alias, err, false).in(u.shape))
	}
	if err != nil && errors.Is(err, ErrNoKey) {
		// Every key of this backend is open, but EDS has not moved the
		// traffic yet. When another relay of the request's pool has a key,
		// Envoy should retry there, and it retries only what the upstream
		// answers: so this attempt goes out on the key that reopens soonest
		// (with a credential, never a refused one) and its 429/5xx/reset
		// moves the request on (previous_priorities).
		var buf [4]string
		if others := ad.otherBackends(buf[:0], b.Name); len(others) > 0 {
			if ok, _ := s.opts.Keys.Available(others); ok {
				pr.LastResort = true
				if l, lerr := s.opts.Keys.Pick(ctx, b.Name, pr); lerr == nil {
					lease, err = l, nil
					s.metrics.lastResort.WithLabelValues(b.Name).Inc()
				}
			}
		}
	}
	if err != nil && ctx.Err() != nil {
		// The attempt's stream ended during the pick (the client left):
		// nobody reads the answer, and no key failed.
		return lease, localError(errNoKey(u.alias, err).in(u.shape))
	}
	if err != nil {
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		s.log.Warn("no upstream key for the attempt", "backend", b.Name, "request_id", u.requestID, "attempt", attempt, "err", err)
		return lease, localError(errNoKey(u.alias, err).in(u.shape))
	}
	u.keyID = lease.KeyID
	s.metrics.pickedFor(b.Name, lease.KeyID).Inc()
	return lease, nil
}

// setCredentials sets the key by the backend's auth, its static headers,
// and Anthropic's version headers for Anthropic-style backends only, from
// the admission (an earlier attempt on another backend may have removed
// them from the shared map).
func setCredentials(a *envoymsg.Answer, b *config.Backend, lease Lease, ad *admitted) {
	switch b.Auth {
	case config.AuthXAPIKey:
		a.Set("x-api-key", lease.Secret)
	case config.AuthAPIKey:
		a.Set("api-key", lease.Secret)
	default:
		a.SetBearer(lease.Secret)
	}
	for k, v := range b.Headers {
		a.Set(k, v)
	}
	if b.Anthropic() {
		a.Set("anthropic-version", cmp.Or(ad.anthropicVersion, family.DefaultAnthropicVersion))
		if ad.anthropicBeta != "" {
			a.Set("anthropic-beta", ad.anthropicBeta)
		} else {
			a.Remove("anthropic-beta")
		}
	} else {
		a.Remove("anthropic-version")
		a.Remove("anthropic-beta")
	}
}

// setTarget sets the attempt's :path and, when the body must change for
// this backend (another family, or another model name), asks Envoy for it.
func (u *upstreamStream) setTarget(a *envoymsg.Answer, resp *extprocv3.ProcessingResponse, tr *translate.Translator, ad *admitted,
	upstreamModel string, hasLength, bodyless bool) {
	b := u.backend
	if tr != nil && !bodyless {
		// Another family: the body is rewritten for every attempt on this
		// backend, under the backend family's path (the client's query
		// belongs to the client's family). The answer is translated back
		// by the router-level filter, which reads it plain.
		u.tr = tr
		u.upstreamModel, u.rewrite = cmp.Or(upstreamModel, u.alias), true
		a.Set(":path", b.UpstreamPath(tr.Path))
		a.Set("accept-encoding", "identity")
		resp.ModeOverride = envoymsg.BodyOverride
		return
	}
	a.Set(":path", b.UpstreamPath(ad.path))
	if upstreamModel != "" && upstreamModel != u.alias && !bodyless {
		u.upstreamModel, u.rewrite = upstreamModel, true
		resp.ModeOverride = envoymsg.BodyOverride
	} else if hasLength && ad.bodyBytes > 0 {
		// An earlier attempt that renamed the model set content-length for
		// its own body; bodies are per attempt (the router copies its retry
		// buffer, router.cc Filter::doRetry), the map is not.
		a.SetInt("content-length", ad.bodyBytes)
	}
}
