package extproc

import (
	"context"
	"github.com/swarmgate/swarmgate/extproc/family"
	"net/http"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// requestBody runs admission on the whole body: scan (extproc/admit),
// route, then keys, budget and reservation; the answer routes the request
// and carries the signed admission.
func (s *Server) requestBody(ctx context.Context, r *routerStream, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	body, resp := s.collectBody(r, b)
	if resp != nil {
		return resp
	}
	f := &r.f
	cr, x := s.admit.Scan(ctx, r.cfg, f, body)
	if x != nil {
		return s.refused(r, x)
	}
	r.viewFacts()
	if resp := s.route(r, f.Model, f.Alias, cr, body); resp != nil {
		return resp
	}
	var t admit.Timer
	if s.opts.Queue != nil {
		t = timerOf(ctx)
	}
	if x := s.admit.Admit(ctx, r.cfg, f, t); x != nil {
		return s.refused(r, x)
	}
	s.metrics.admittedFor(f.Tenant(), f.Alias).requests.Inc()
	if s.opts.Tracer != nil {
		s.startSpan(r, cr, f.Tenant())
	}
	return s.admittedAnswer(r, cr, body)
}

// collectBody is the whole request body, within request.max_body_bytes;
// resp is set when there is no body to admit yet (a piece of a split body)
// or it is refused.
func (s *Server) collectBody(r *routerStream, b *extprocv3.HttpBody) (body []byte, resp *extprocv3.ProcessingResponse) {
	limit := int64(r.cfg.Request.MaxBodyBytes)
	body = b.GetBody()
	if !b.GetEndOfStream() || len(r.reqBody) > 0 {
		// Not BUFFERED as configured: collect pieces until the end.
		if int64(len(r.reqBody)+len(body)) > limit {
			return nil, s.refused(r, admit.TooLarge(limit))
		}
		r.reqBody = append(r.reqBody, body...)
		if !b.GetEndOfStream() {
			return nil, envoymsg.Continue(envoymsg.RequestBody)
		}
		body = r.reqBody
	}
	if int64(len(body)) > limit {
		return nil, s.refused(r, admit.TooLarge(limit))
	}
	return body, nil
}

// route chooses the pool (the cluster Envoy routes to) and the backends
// that may serve the request, into the facts; a non-nil answer ends the
// request here (a refusal, or count_tokens answered locally).
func (s *Server) route(r *routerStream, model *config.Model, alias string, cr chatreq.Request, body []byte) *extprocv3.ProcessingResponse {
	// Only targets whose backend takes the request's family, natively or
	// translated, may get it (docs/families.md); a request the translator
	// cannot express goes to the native ones only. A model some of whose
	// targets do not take it is routed to a cluster that holds only the
	// others (xds/ir familyPools), so retries stay there too.
	sel, unsupported := s.familyTargets(r, model, body)
	if sel.take == 0 {
		switch {
		case unsupported != nil:
			return s.refuse(r, errBadRequest(unsupported.Message, "unsupported_parameter", unsupported.Param))
		case r.spec == family.CountTokens:
			return r.withRequestID(s.countTokensLocally(r, cr))
		}
		return s.refuse(r, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "unsupported_api", param: "model",
			message: "The model `" + alias + "` is not served for " + r.spec.Path + " by any of its backends."})
	}
	familyPool := sel.take < len(model.Targets)
	if r.spec.EchoesRequest && !sel.native && sel.speaks < sel.reach {
		r.echo = append(r.echo[:0], body...)
	}

	// Context-window-aware routing: skip targets too small for prompt plus
	// output; restrict the pool to the rest (docs/extproc.md, decisions).
	need := r.estTokens + r.maxOut
	minFit, fits, selMax := 0, 0, 0
	for _, t := range model.Targets {
		if r.pinned.Backend != "" && t.Backend != r.pinned.Backend {
			continue
		}
		if familyPool && !sel.takes(r.cfg, r.spec, t.Backend) {
			continue
		}
		selMax = max(selMax, t.ContextWindow)
		if t.ContextWindow == 0 || t.ContextWindow >= need {
			fits++
			r.backends = append(r.backends, t.Backend)
			if t.ContextWindow > 0 && (minFit == 0 || t.ContextWindow < minFit) {
				minFit = t.ContextWindow
			}
		}
	}
	if fits == 0 {
		return s.refuse(r, errBadRequest("This model's maximum context length is "+strconv.Itoa(maxWindow(model))+
			" tokens. However, you requested about "+strconv.Itoa(need)+" tokens ("+strconv.Itoa(r.estTokens)+
			" in the messages, "+strconv.Itoa(r.maxOut)+" in the completion). Please reduce the length of the messages or completion.",
			"context_length_exceeded", "messages"))
	}
	pool := contract.PoolCluster(alias)
	switch {
	case r.pinned.Backend != "" && len(model.Targets) > 1:
		// Only the backend holding the previous response, retries
		// included; its context window is not checked further.
		pool = contract.PoolBackendCluster(alias, r.pinned.Backend)
	case familyPool && fits < sel.take:
		// The family's cluster restricted to the windows that fit, as
		// for the whole pool below (xds/ir familyPools).
		if minFit == 0 {
			minFit = selMax + 1
		}
		pool = sel.cluster(alias, r.spec.Name, minFit)
	case familyPool:
		pool = sel.cluster(alias, r.spec.Name, 0)
	case fits < len(model.Targets):
		if minFit == 0 {
			// Only targets of unknown window fit: above every known one.
			minFit = maxWindow(model) + 1
		}
		pool = contract.PoolContextCluster(alias, minFit)
	}
	r.f.Pool, r.f.Backends = pool, r.backends
	// The admission lists the backends when the pool holds only some.
	r.f.Restricted = fits < len(model.Targets) || familyPool || r.f.Pinned.Backend != ""
	return nil
}

// admittedAnswer is the admitted request's answer: the routing headers,
// the body with include_usage spliced in when the gateway asks for usage
// the client did not, and the admission as dynamic metadata.
func (s *Server) admittedAnswer(r *routerStream, cr chatreq.Request, body []byte) *extprocv3.ProcessingResponse {
	f := &r.f
	a := r.answer()
	resp, cresp := a.Start(envoymsg.RequestBody)
	// Headers carry only what the route match needs (clear_route_cache
	// acts only with a header mutation in the same answer:
	// processor_state.cc clearRouteCache, Envoy 1.38). Everything later
	// stages read travels as dynamic metadata, because the upstream
	// filters of every attempt share and mutate one header map.
	cresp.ClearRouteCache = true
	a.Set(contract.HeaderPool, f.Pool)
	if f.Long(r.cfg) {
		a.Set(contract.HeaderLong, "1")
	}
	bodyBytes := len(body)
	backends := r.cfg.TargetBackends(f.Alias)
	if f.Restricted {
		backends = strings.Join(f.Backends, ",")
	}
	if f.Stream && !f.ClientUsage && f.Spec.InjectUsage {
		// Positions from the Scan: no second pass. The answer is encoded
		// before Send returns, so the stream's buffer is reused.
		r.spliced = cr.AppendIncludeUsage(r.spliced[:0], body)
		nb := r.spliced
		r.hideUsage = true
		// BUFFERED with headers SENT: the processor must keep
		// content-length right (processing_mode.proto, BodySendMode).
		a.SetInt("content-length", len(nb))
		// The usage chunk is removed from the plain SSE stream, so ask the
		// upstream not to compress it.
		a.Remove("accept-encoding")
		a.SetBody(nb)
		bodyBytes = len(nb)
	}
	if r.reqMeta == nil {
		r.reqMeta = &requestMeta{}
	}
	resp.DynamicMetadata = r.reqMeta.fill(s.signer(r.cfg), admitted{
		requestID: f.RequestID, tenant: f.Tenant(), virtualKey: f.KeyID(), model: f.Alias,
		estTokens: f.EstTokens, maxTokens: f.MaxOut, sticky: f.StickyKey(), path: f.RawPath, backends: backends,
		bodyBytes: bodyBytes, issued: s.opts.Now().Unix(), reservation: f.Reservation.ID,
		anthropicVersion: f.AnthropicVersion, anthropicBeta: f.AnthropicBeta, key: f.Pinned.KeyID,
	})
	return resp
}

func maxWindow(m *config.Model) int {
	w := 0
	for _, t := range m.Targets {
		w = max(w, t.ContextWindow)
	}
	return w
}
