package extproc

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// upstreamStream is one attempt. Nothing here outlives the stream: all
// inputs come from the forwarded admission metadata and attributes, so the
// router-level stream of the same request may run on another replica.
type upstreamStream struct {
	cfg           *config.Config
	backend       *config.Backend
	keyID         string
	requestID     string
	upstreamModel string
	alias         string
	rewrite       bool
	// tr translates the request for a backend that does not speak the
	// client's family (extproc/translate); shape is the client's errors.
	tr    *translate.Translator
	shape family.ErrorShape
	// dropped names the hosted tools the translation dropped
	// (contract.HeaderDroppedTools on the attempt's answer).
	dropped  string
	reported bool   // the attempt's response headers were reported
	scratch  []byte // the decoded admission token; kept across pooled uses
	ans      *envoymsg.Answer
}

func (s *Server) serveUpstream(st extprocv3.ExternalProcessor_ProcessServer) error {
	u := s.upstreams.Get().(*upstreamStream)
	*u = upstreamStream{cfg: s.cfg.Load(), ans: u.ans, scratch: u.scratch}
	if u.ans == nil {
		u.ans = &envoymsg.Answer{}
	}
	defer s.upstreams.Put(u)
	ctx := st.Context()
	for {
		req, err := st.Recv()
		if err != nil {
			// Envoy ends the attempt's stream without response headers
			// when the upstream reset or refused the connection: that is an
			// outcome for the key's breaker too (5xx/reset count), or a
			// relay that resets everything would never be failed over. It
			// ends it the same way when the client went away, which is not
			// the key's failure: the key pool waits for the router-level
			// stream's word on that (Cancelled) before it counts.
			if u.keyID != "" && !u.reported {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				s.opts.Keys.Unanswered(rctx, u.backend.Name, u.keyID, u.requestID)
				cancel()
			}
			if streamEnded(err) {
				return nil
			}
			return err
		}
		start := time.Now()
		var resp *extprocv3.ProcessingResponse
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = s.upstreamHeaders(ctx, u, req, v.RequestHeaders)
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = s.upstreamBody(u, v.RequestBody)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = s.upstreamResponse(ctx, u, v.ResponseHeaders)
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		default:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		}
		s.opts.Metrics.ObservePhase(telemetry.FilterUpstream, phase(req), time.Since(start))
		if err := st.Send(resp); err != nil {
			return nil
		}
	}
}

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
	// Every attempt works on the router's one request header map, which
	// may already carry an earlier attempt's credential, static headers and
	// :path for another backend (source/common/router/upstream_request.cc,
	// UpstreamRequest::acceptHeadersFromRouter, Envoy 1.38). So each
	// attempt removes whatever it does not set itself and sets everything
	// from the admission facts, never from what is in the map.
	var hasLength bool
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
	ad, scratch, ok := readAdmitted(req.GetMetadataContext().GetFilterMetadata()[contract.AdmissionNamespace], s.signer(u.cfg), s.opts.Now(), u.scratch)
	if cap(scratch) <= 64<<10 {
		u.scratch = scratch
	}
	if !ok {
		// No signed admission: the router-level filter did not admit this
		// request (it failed open, or the stream is not Envoy's). No key.
		s.metrics.unadmitted.Inc()
		s.log.Warn("upstream attempt without a valid admission identity; no key given", "backend", backendName, "attempt", attempt)
		return localError(errNotAdmitted().in(family.ShapeForPath(pathOf(h))))
	}
	u.requestID, u.alias = ad.requestID, ad.model
	spec := family.ForPath(pathOnly(ad.path))
	shape := family.ShapeForPath(pathOnly(ad.path))
	u.shape = shape
	if !known {
		s.log.Warn("upstream attempt without a known backend in host metadata", "backend", backendName, "request_id", u.requestID)
		return localError(errNotAdmitted().in(shape))
	}
	u.backend = b
	tr, takes := translatorFor(b, spec)
	if !takes {
		// The request's cluster holds only backends that take its family
		// (xds/ir familyPools); a config change between admission and this
		// attempt can still leave one that does not.
		s.log.Warn("upstream attempt on a backend that does not take the request's API family", "backend", b.Name, "request_id", u.requestID)
		return localError(errNotAdmitted().in(shape))
	}
	if ad.key != "" && ad.backends != b.Name {
		// The request continues a response only one backend holds; Envoy
		// sent this attempt elsewhere (a retry in a cluster that holds
		// other backends too). No other backend's key may take it.
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		return localError(errPinnedKey(u.alias, nil, true).in(shape))
	}
	pr := PickRequest{RequestID: u.requestID, Attempt: attempt, Sticky: ad.sticky, EstTokens: ad.estTokens, Key: ad.key}
	lease, err := s.opts.Keys.Pick(ctx, b.Name, pr)
	if err != nil && ad.key != "" {
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		s.log.Warn("the key holding previous_response_id cannot take the attempt", "backend", b.Name, "key", ad.key, "request_id", u.requestID, "err", err)
		return localError(errPinnedKey(u.alias, err, false).in(shape))
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
	if err != nil {
		// No attempt leaves without a credential: from Envoy 1.36 an
		// upstream filter's local reply goes to the client, not retried
		// (UpstreamFilterManager::sendLocalReply, upstream_request.cc).
		s.metrics.pickFailures.WithLabelValues(b.Name).Inc()
		s.log.Warn("no upstream key for the attempt", "backend", b.Name, "request_id", u.requestID, "attempt", attempt, "err", err)
		return localError(errNoKey(u.alias, err).in(shape))
	}
	u.keyID = lease.KeyID
	s.metrics.pickedFor(b.Name, lease.KeyID).Inc()
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
	// Anthropic's version headers go to Anthropic-style backends only,
	// from the admission (an earlier attempt on another backend may have
	// removed them from the shared map).
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
	if tr != nil && !h.GetEndOfStream() {
		// Another family: the body is rewritten for every attempt on this
		// backend, under the backend family's path (the client's query
		// belongs to the client's family). The answer is translated back
		// by the router-level filter, which reads it plain.
		u.tr = tr
		u.upstreamModel, u.rewrite = cmp.Or(upstreamModel, u.alias), true
		a.Set(":path", b.UpstreamPath(tr.Path))
		a.Set("accept-encoding", "identity")
		resp.ModeOverride = envoymsg.BodyOverride
		return resp
	}
	a.Set(":path", b.UpstreamPath(ad.path))
	if upstreamModel != "" && upstreamModel != u.alias && !h.GetEndOfStream() {
		u.upstreamModel, u.rewrite = upstreamModel, true
		resp.ModeOverride = envoymsg.BodyOverride
	} else if hasLength && ad.bodyBytes > 0 {
		// An earlier attempt that renamed the model set content-length for
		// its own body; bodies are per attempt (the router copies its retry
		// buffer, router.cc Filter::doRetry), the map is not.
		a.SetInt("content-length", ad.bodyBytes)
	}
	return resp
}

func (s *Server) upstreamBody(u *upstreamStream, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	if !u.rewrite || !b.GetEndOfStream() {
		return resp
	}
	var nb []byte
	var err error
	if u.tr != nil {
		nb, err = u.tr.Request(b.GetBody(), translate.RequestOptions{Model: u.upstreamModel, DefaultMaxTokens: u.cfg.Request.DefaultMaxOutputTokens,
			MaxTokensField: u.backend.MaxTokensField, Hosted: hostedPolicy(u.backend, false), Dropped: func(tool string) {
				u.dropped = translate.AppendDroppedHeader(u.dropped, tool)
				s.metrics.droppedTools.WithLabelValues(u.backend.Name, translate.HostedToolLabel(tool)).Inc()
			}})
		if err != nil {
			// The router-level filter translated this body once to choose
			// the cluster; only a config change in between gets here.
			s.metrics.untranslatable.Inc()
			var un *translate.Unsupported
			msg, param := "The request cannot be translated for this backend: "+err.Error(), ""
			if errors.As(err, &un) {
				msg, param = un.Message, un.Param
			}
			return localError(errBadRequest(msg, "unsupported_parameter", param).in(u.shape))
		}
		s.metrics.translated.WithLabelValues(u.tr.From, u.tr.To, "request").Inc()
	} else if nb, err = chatreq.SetModel(b.GetBody(), u.upstreamModel); err != nil {
		// The router-level filter validated this body; leave it as it is.
		return resp
	}
	return envoymsg.ReplaceBody(nb, strconv.Itoa(len(nb)))
}

// upstreamResponse feeds the attempt's outcome to the key pool and tags the
// response with the backend and key for the router-level accounting.
func (s *Server) upstreamResponse(ctx context.Context, u *upstreamStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	a := u.ans
	resp, _ := a.Start(envoymsg.ResponseHeaders)
	if u.backend == nil {
		return resp
	}
	hs := h.GetHeaders().GetHeaders()
	get := func(name string) string {
		for _, kv := range hs {
			if kv.GetKey() == name {
				return envoymsg.HeaderValue(kv)
			}
		}
		return ""
	}
	st, _ := strconv.Atoi(get(":status"))
	if u.keyID != "" {
		s.opts.Keys.Report(ctx, u.backend.Name, u.keyID, u.requestID, s.opts.Keys.ParseOutcome(st, get))
		u.reported = true
	}
	a.Set(contract.HeaderBackend, u.backend.Name)
	if u.dropped != "" {
		a.Set(contract.HeaderDroppedTools, u.dropped)
	}
	if u.keyID != "" {
		a.Set(contract.HeaderUpstreamKey, u.keyID)
	}
	return resp
}

// pathOnly is a :path without its query.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

// pathOf is the request's :path in the attempt's header map (only to pick
// an error shape when there is no admission to read it from).
func pathOf(h *extprocv3.HttpHeaders) string {
	for _, kv := range h.GetHeaders().GetHeaders() {
		if kv.GetKey() == ":path" {
			return pathOnly(envoymsg.HeaderValue(kv))
		}
	}
	return ""
}
