package extproc

import (
	"context"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// finish accounts the request once: at the response's end_of_stream, or
// when the stream ends without it (client disconnect, upstream reset, local
// reply), billed per accounting.bill_on_disconnect.
func (s *Server) finish(r *routerStream, cut bool) {
	if r.finished {
		return
	}
	r.finished = true
	r.closeDecoder()
	if !r.f.Admitted {
		return
	}
	if !r.f.Spec.Billed {
		// count_tokens: admitted and routed, not a completion. Nothing to
		// bill, nothing reserved (admission skipped the reservation).
		s.observe(r, Entry{RequestID: r.f.RequestID, Time: s.opts.Now(), Tenant: r.f.Tenant(), VirtualKeyID: r.f.KeyID(),
			KeyLabels: r.f.KeyLabels(), Model: r.f.Alias, UpstreamModel: r.upstreamModel, Backend: r.backend, UpstreamKeyID: r.upstreamKey, Status: r.status, Disconnected: cut})
		return
	}
	ok2xx := r.status >= 200 && r.status < 300
	if cut && ok2xx && r.kind == bodySSE && r.parser != nil {
		// SDKs close the connection once they read the last event; when
		// the provider's end of stream comes later, the stream ends here
		// without it. The client had the whole answer: not a disconnect.
		// A translator may send the client its last event before the
		// backend's (message_stop at the chat usage chunk, [DONE] after).
		r.parser.Flush()
		if r.parser.Done() || (r.tr != nil && r.tr.Done()) {
			cut = false
		}
	}
	u, reported := s.reportedUsage(r, ok2xx)
	if ok2xx && r.f.Spec == family.Responses && r.tr == nil {
		// A translated answer's id is the gateway's: no backend holds it.
		s.rememberResponse(r)
	}
	u, estimated := s.billedUsage(r, u, reported, ok2xx, cut)
	r.usage, r.haveUsage = u, ok2xx || cut
	tenant := r.f.Tenant()
	if u.TotalTokens > 0 {
		as := s.metrics.admittedFor(tenant, r.f.Alias)
		as.prompt.Add(float64(u.PromptTokens))
		as.completion.Add(float64(u.CompletionTokens))
	}
	e := Entry{RequestID: r.f.RequestID, Time: s.opts.Now(), Tenant: tenant, VirtualKeyID: r.f.KeyID(), KeyLabels: r.f.KeyLabels(), Model: r.f.Alias,
		UpstreamModel: r.upstreamModel, Backend: r.backend, UpstreamKeyID: r.upstreamKey, Status: r.status, Usage: u,
		Estimated: estimated, Disconnected: cut, Streamed: r.f.Stream}
	e.Cost = s.cost(r, e.Backend, u) // priced once: the ledger, the settle and the metrics read it
	s.record(r, e, ok2xx || cut)
}

// reportedUsage is the usage a 2xx answer reported, if any.
func (s *Server) reportedUsage(r *routerStream, ok2xx bool) (Usage, bool) {
	if !ok2xx {
		return Usage{}, false
	}
	switch {
	case r.kind == bodyJSON && !r.jsonOverflow && len(r.jsonBuf) > 0:
		return s.opts.Usage.FromJSON(r.jsonBuf)
	case r.kind == bodyJSON && r.jsonOverflow:
		return s.opts.Usage.FromJSONTail(r.jsonBuf)
	case r.kind == bodySSE && r.parser != nil:
		r.parser.Flush()
		return r.parser.Usage()
	}
	return Usage{}, false
}

// billedUsage is what the request is billed: the reported usage, or for a
// cut stream what accounting.bill_on_disconnect says, or for a 2xx answer
// without a report what was delivered (estimated). A report whose output
// count is provisional (Anthropic's message_start, the stream cut or
// failed before message_delta) counts as reported for its prompt only.
func (s *Server) billedUsage(r *routerStream, u Usage, reported, ok2xx, cut bool) (_ Usage, estimated bool) {
	if cut {
		s.metrics.disconnects.Inc()
		switch r.cfg.Accounting.BillOnDisconnect {
		case "reserved":
			u, estimated = Usage{PromptTokens: int64(r.f.EstTokens), CompletionTokens: int64(r.f.MaxOut)}, true
		case "delivered":
			u, estimated = s.delivered(r), true
		default: // "reported"
			switch {
			case !reported:
				u, estimated = s.delivered(r), true
			case r.provisional():
				u, estimated = s.deliveredOutput(r, u), true
			}
		}
	} else if ok2xx {
		switch {
		case !reported && r.unreadable:
			// An answer in an encoding the gateway does not read (the
			// provider ignored accept-encoding): nothing was counted, so
			// the most the request could cost, not the least.
			u, estimated = Usage{PromptTokens: int64(r.f.EstTokens), CompletionTokens: int64(r.f.MaxOut)}, true
		case !reported:
			u, estimated = s.delivered(r), true
		case r.provisional():
			u, estimated = s.deliveredOutput(r, u), true
		}
	}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u, estimated
}

// record writes the ledger entry of a served request, observes it, then
// settles the reservation (or releases it when no provider served it):
// record first, so spend is never under-counted.
func (s *Server) record(r *routerStream, e Entry, served bool) {
	var ctx context.Context = context.Background()
	if s.opts.Ledger != nil || (r.f.Reserved && s.opts.Reserver != nil) {
		// The stream's context may be gone (client disconnect): bound the
		// accounting writes on their own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.SettleTimeout)
		defer cancel()
	}
	if s.opts.Ledger != nil && served {
		if err := s.opts.Ledger.Record(ctx, e); err != nil {
			s.metrics.accountingErr.WithLabelValues("ledger").Inc()
			s.log.Warn("ledger write failed", "request_id", r.f.RequestID, "err", err)
		}
	}
	s.observe(r, e)
	if !r.f.Reserved || s.opts.Reserver == nil {
		return
	}
	var err error
	if served {
		err = s.opts.Reserver.Settle(ctx, r.f.Reservation, e)
	} else {
		err = s.opts.Reserver.Release(ctx, r.f.Reservation)
	}
	if err != nil {
		s.metrics.accountingErr.WithLabelValues("settle").Inc()
		s.log.Warn("reservation settle failed", "request_id", r.f.RequestID, "err", err)
	}
	s.admit.Freed()
}

// observe feeds the data-path metrics and the access log.
func (s *Server) observe(r *routerStream, e Entry) {
	if s.opts.Metrics == nil && s.opts.AccessLog == nil && r.span == nil {
		return
	}
	lat := time.Since(r.start)
	var ttft time.Duration
	if r.f.Stream && !r.firstChunk.IsZero() {
		ttft = r.firstChunk.Sub(r.start)
	}
	tok := telemetry.Tokens{Input: e.Usage.PromptTokens, Output: e.Usage.CompletionTokens, CachedInput: e.Usage.CachedTokens, Reasoning: e.Usage.ReasoningTokens}
	cost := e.Cost.Float()
	status := e.Status
	if e.Disconnected {
		status = 0
	}
	s.opts.Metrics.ObserveRequest(telemetry.Completion{Labels: telemetry.Labels{Tenant: e.Tenant, Model: e.Model, Backend: e.Backend},
		Status: status, Latency: lat, TTFT: ttft, Tokens: tok, Cost: cost})
	reason := ""
	if e.Disconnected {
		reason = "stream cut before its end"
	}
	s.opts.AccessLog.Log(telemetry.RequestLog{RequestID: e.RequestID, ClientRequestID: r.f.ClientID, Tenant: e.Tenant, VirtualKeyID: e.VirtualKeyID, Model: e.Model,
		UpstreamModel: e.UpstreamModel, UpstreamRequestID: r.upstreamRequestID, Backend: e.Backend, KeyID: e.UpstreamKeyID, Status: status, Stream: r.f.Stream, Tokens: tok, Cost: cost, Latency: lat, TTFT: ttft, Reason: reason})
	if r.span != nil {
		errType := ""
		switch {
		case e.Disconnected:
			errType = "stream_cut"
		case status == http.StatusTooManyRequests:
			errType = "rate_limited"
		case status >= 500:
			errType = "upstream_5xx"
		}
		telemetry.EndGenAISpan(r.span, telemetry.GenAIResponse{Model: e.UpstreamModel, Tokens: tok, Status: status, Backend: e.Backend, KeyID: e.UpstreamKeyID,
			Cost: cost, ErrorType: errType})
		r.span = nil
	}
}

// cost prices usage at the serving target's price (the dearest target when
// no backend answered).
func (s *Server) cost(r *routerStream, backend string, u Usage) pricing.Money {
	var c pricing.Money
	for _, t := range r.f.Model.Targets {
		tc := pricing.RateOf(t.Price).Cost(u)
		if t.Backend == backend {
			return tc
		}
		c = max(c, tc)
	}
	return c
}

// provisional reports whether the stream's usage report is only its
// opening count: its prompt stands, its output is not the answer's.
func (r *routerStream) provisional() bool { return r.parser != nil && r.parser.Provisional() }

// deliveredOutput is a provisional report with its output raised to what
// was delivered: the provider said ~1 token before it streamed hundreds.
func (s *Server) deliveredOutput(r *routerStream, u Usage) Usage {
	u.CompletionTokens = max(u.CompletionTokens, s.delivered(r).CompletionTokens)
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// delivered estimates usage from what reached the client: the prompt
// estimate plus streamed content at the configured bytes per token.
func (s *Server) delivered(r *routerStream) Usage {
	u := Usage{PromptTokens: int64(r.f.EstTokens)}
	if r.parser != nil {
		bpt := r.cfg.Request.BytesPerToken
		if bpt <= 0 {
			bpt = 4
		}
		u.CompletionTokens = int64(float64(r.parser.DeliveredContentBytes())/bpt + 0.999)
	}
	return u
}
