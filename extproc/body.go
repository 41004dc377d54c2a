package extproc

import (
	"context"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/internal/chatreq"
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
	if resp := s.route(r, cr, body); resp != nil {
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
// that may serve the request, into the facts (internal/routing, the plan
// xds/ir builds the clusters from); a non-nil answer ends the request here
// (a refusal, or count_tokens answered locally).
func (s *Server) route(r *routerStream, cr chatreq.Request, body []byte) *extprocv3.ProcessingResponse {
	f := &r.f
	pool, resp := s.choose(r, f.Model, cr, body, f.EstTokens+f.MaxOut)
	if resp != nil {
		return resp
	}
	f.Pool = s.clusterName(r.cfg, pool)
	// The admission lists the backends when the pool holds only some.
	f.Restricted = len(f.Backends) < len(f.Model.Targets) || pool.Family != "" || f.Pinned.Backend != ""
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
	parent, parentQuota := parentLimits(f.Owner)
	resp.DynamicMetadata = r.reqMeta.fill(s.signer(r.cfg), admitted{
		requestID: f.RequestID, tenant: f.Tenant(), virtualKey: f.KeyID(), model: f.Alias,
		estTokens: f.EstTokens, maxTokens: f.MaxOut, sticky: f.StickyKey(), path: f.RawPath, backends: backends,
		bodyBytes: bodyBytes, issued: s.opts.Now().Unix(), reservation: f.Reservation.ID,
		anthropicVersion: f.AnthropicVersion, anthropicBeta: f.AnthropicBeta, key: f.Pinned.KeyID,
	}, keyLimits(f.Owner.Key), parent, parentQuota)
	return resp
}
