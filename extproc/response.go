package extproc

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/telemetry"
)

var removeAttemptHeaders = []string{contract.HeaderBackend, contract.HeaderUpstreamKey, contract.HeaderRetry}

// bodyReply is a per-stream response-body answer, reused for every chunk:
// gRPC marshals a message inside Send, before the next chunk is handled, so
// a streamed body costs no allocation per chunk.
type bodyReply struct {
	resp   extprocv3.ProcessingResponse
	oneof  extprocv3.ProcessingResponse_ResponseBody
	body   extprocv3.BodyResponse
	common extprocv3.CommonResponse
	mut    extprocv3.BodyMutation
	mutB   extprocv3.BodyMutation_Body
}

func (b *bodyReply) continueChunk() *extprocv3.ProcessingResponse {
	b.body.Response = nil
	b.oneof.ResponseBody = &b.body
	b.resp.Response = &b.oneof
	b.resp.DynamicMetadata = nil
	return &b.resp
}

func (b *bodyReply) replaceChunk(out []byte) {
	b.mutB.Body = out
	b.mut.Mutation = &b.mutB
	b.common.BodyMutation = &b.mut
	b.body.Response = &b.common
}

func (s *Server) responseHeaders(r *routerStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var ctype, cenc string
	for _, kv := range h.GetHeaders().GetHeaders() {
		switch kv.GetKey() {
		case ":status":
			r.status, _ = strconv.Atoi(headerValue(kv))
		case "content-type":
			ctype = headerValue(kv)
		case "content-encoding":
			cenc = headerValue(kv)
		case contract.HeaderBackend:
			r.backend = headerValue(kv)
		case contract.HeaderUpstreamKey:
			r.upstreamKey = headerValue(kv)
		}
	}
	switch {
	case strings.HasPrefix(ctype, "text/event-stream"):
		r.kind = bodySSE
	case strings.HasPrefix(ctype, "application/json"):
		r.kind = bodyJSON
	default:
		r.kind = bodyOther
	}
	if r.admitted && r.status >= 200 && r.status < 300 {
		switch {
		case strings.EqualFold(cenc, "gzip"):
			r.gzip = true
			r.decoder = s.opts.Usage.NewGzip()
		case cenc != "" && !strings.EqualFold(cenc, "identity"):
			r.kind = bodyOther // cannot read usage from it
		}
		if r.kind == bodySSE {
			// The pooled stream's parser and filter, reset: their buffers
			// serve request after request.
			if r.ownParser == nil {
				r.ownParser = s.opts.Usage.NewStream()
			} else {
				r.ownParser.Reset()
			}
			r.parser = r.ownParser
			if r.hideUsage && !r.gzip {
				if r.ownFilter == nil {
					r.ownFilter = s.opts.Usage.NewFilter()
				} else {
					r.ownFilter.Reset()
				}
				r.filter = r.ownFilter
			}
		}
	}
	a := r.answer()
	resp, _ := a.start(answerResponseHeaders)
	for _, h := range removeAttemptHeaders {
		a.remove(h)
	}
	if r.admitted && r.status == http.StatusServiceUnavailable && r.backend == "" {
		// Envoy's own 503 (no healthy upstream: the request was in flight
		// when its pool's last key opened and EDS marked the backends down).
		// Later requests get admission's 503 with Retry-After; give this one
		// the same hint so clients back off uniformly.
		if ok, ra := s.opts.Keys.Available(r.backends); !ok && ra > 0 {
			a.setInt("retry-after", int(max(ra.Round(time.Second), time.Second)/time.Second))
		}
	}
	if h.GetEndOfStream() {
		s.finish(r, false)
		if md := r.metadata(); md != nil {
			resp.DynamicMetadata = md
		}
	}
	return resp
}

func (s *Server) responseBody(r *routerStream, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	chunk := b.GetBody()
	if r.firstChunk.IsZero() && len(chunk) > 0 {
		r.firstChunk = time.Now()
	}
	if r.reply == nil {
		r.reply = &bodyReply{}
	}
	resp := r.reply.continueChunk()
	if r.admitted && !r.finished {
		plain := chunk
		if r.decoder != nil {
			p, err := r.decoder.Decode(chunk)
			if err == nil && b.GetEndOfStream() {
				var tail []byte
				tail, err = r.decoder.Close()
				r.decoder = nil
				p = append(p, tail...)
			}
			if err != nil {
				r.closeDecoder()
				r.kind = bodyOther
			}
			plain = p
		}
		switch r.kind {
		case bodySSE:
			if r.parser != nil {
				r.parser.Write(plain)
			}
			if r.filter != nil {
				out := r.filter.Write(chunk)
				if b.GetEndOfStream() {
					out = append(out, r.filter.Flush()...)
				}
				if len(out) != len(chunk) || string(out) != string(chunk) {
					r.reply.replaceChunk(out)
				}
			}
		case bodyJSON:
			if !r.jsonOverflow {
				if len(r.jsonBuf)+len(plain) > maxUsageJSON {
					r.jsonOverflow, r.jsonBuf = true, r.jsonBuf[:0]
				} else {
					r.jsonBuf = append(r.jsonBuf, plain...)
				}
			}
		}
	}
	if b.GetEndOfStream() {
		s.finish(r, false)
		if md := r.metadata(); md != nil {
			resp.DynamicMetadata = md
		}
	}
	return resp
}

func (r *routerStream) closeDecoder() {
	if r.decoder != nil {
		_, _ = r.decoder.Close()
		r.decoder = nil
	}
}

// accounted holds the figures finish computed, for the dynamic metadata.
func (r *routerStream) metadata() *structpb.Struct {
	if !r.admitted || !r.haveUsage {
		return nil
	}
	if r.meta == nil {
		r.meta = &tokenMeta{}
	}
	return r.meta.fill(r.usage, r.estTokens)
}

// finish accounts the request once: at the response's end_of_stream, or
// when the stream ends without it (client disconnect, upstream reset, local
// reply), billed per accounting.bill_on_disconnect.
func (s *Server) finish(r *routerStream, cut bool) {
	if r.finished {
		return
	}
	r.finished = true
	r.closeDecoder()
	if !r.admitted {
		return
	}
	ok2xx := r.status >= 200 && r.status < 300
	var u Usage
	reported := false
	if ok2xx {
		switch {
		case r.kind == bodyJSON && !r.jsonOverflow && len(r.jsonBuf) > 0:
			u, reported = s.opts.Usage.FromJSON(r.jsonBuf)
		case r.kind == bodySSE && r.parser != nil:
			r.parser.Flush()
			u, reported = r.parser.Usage()
		}
	}
	estimated := false
	if cut {
		s.metrics.disconnects.Inc()
		switch r.cfg.Accounting.BillOnDisconnect {
		case "reserved":
			u, estimated = Usage{PromptTokens: int64(r.estTokens), CompletionTokens: int64(r.maxOut)}, true
		case "delivered":
			u, estimated = s.delivered(r), true
		default: // "reported"
			if !reported {
				u, estimated = s.delivered(r), true
			}
		}
	} else if ok2xx && !reported {
		u, estimated = s.delivered(r), true
	}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	r.usage, r.haveUsage = u, ok2xx || cut
	tenant, key := r.owner.Tenant.Name, r.owner.Key.ID
	if u.TotalTokens > 0 {
		as := s.metrics.admittedFor(tenant, r.alias)
		as.prompt.Add(float64(u.PromptTokens))
		as.completion.Add(float64(u.CompletionTokens))
	}
	e := Entry{RequestID: r.requestID, Time: s.opts.Now(), Tenant: tenant, VirtualKeyID: key, Model: r.alias,
		Backend: r.backend, UpstreamKeyID: r.upstreamKey, Status: r.status, Usage: u, Estimated: estimated, Disconnected: cut, Streamed: r.stream}
	served := ok2xx || cut
	var ctx context.Context = context.Background()
	if s.opts.Ledger != nil || (r.reserved && s.opts.Reserver != nil) {
		// The stream's context may be gone (client disconnect): bound the
		// accounting writes on their own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.SettleTimeout)
		defer cancel()
	}
	if s.opts.Ledger != nil && served {
		if err := s.opts.Ledger.Record(ctx, e); err != nil {
			s.metrics.accountingErr.WithLabelValues("ledger").Inc()
			s.log.Warn("ledger write failed", "request_id", r.requestID, "err", err)
		}
	}
	s.observe(r, e)
	if r.reserved && s.opts.Reserver != nil {
		// Record first, then settle: spend is never under-counted.
		var err error
		if served {
			err = s.opts.Reserver.Settle(ctx, r.reservation, e)
		} else {
			err = s.opts.Reserver.Release(ctx, r.reservation)
		}
		if err != nil {
			s.metrics.accountingErr.WithLabelValues("settle").Inc()
			s.log.Warn("reservation settle failed", "request_id", r.requestID, "err", err)
		}
	}
}

// observe feeds the data-path metrics and the access log.
func (s *Server) observe(r *routerStream, e Entry) {
	if s.opts.Metrics == nil && s.opts.AccessLog == nil && r.span == nil {
		return
	}
	lat := time.Since(r.start)
	var ttft time.Duration
	if r.stream && !r.firstChunk.IsZero() {
		ttft = r.firstChunk.Sub(r.start)
	}
	tok := telemetry.Tokens{Input: e.Usage.PromptTokens, Output: e.Usage.CompletionTokens, CachedInput: e.Usage.CachedTokens, Reasoning: e.Usage.ReasoningTokens}
	cost := s.cost(r, e)
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
	s.opts.AccessLog.Log(telemetry.RequestLog{RequestID: e.RequestID, Tenant: e.Tenant, VirtualKeyID: e.VirtualKeyID, Model: e.Model,
		Backend: e.Backend, KeyID: e.UpstreamKeyID, Status: status, Stream: r.stream, Tokens: tok, Cost: cost, Latency: lat, TTFT: ttft, Reason: reason})
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
		telemetry.EndGenAISpan(r.span, telemetry.GenAIResponse{Tokens: tok, Status: status, Backend: e.Backend, KeyID: e.UpstreamKeyID,
			Cost: cost, ErrorType: errType})
		r.span = nil
	}
}

// cost prices usage at the serving target's price (the dearest target when
// no backend answered).
func (s *Server) cost(r *routerStream, e Entry) float64 {
	u := pricing.Usage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, TotalTokens: e.Usage.TotalTokens,
		CachedTokens: e.Usage.CachedTokens, ReasoningTokens: e.Usage.ReasoningTokens}
	var c pricing.Money
	for _, t := range r.model.Targets {
		tc := pricing.RateOf(t.Price).Cost(u)
		if t.Backend == e.Backend {
			return tc.Float()
		}
		c = max(c, tc)
	}
	return c.Float()
}

// delivered estimates usage from what reached the client: the prompt
// estimate plus streamed content at the configured bytes per token.
func (s *Server) delivered(r *routerStream) Usage {
	u := Usage{PromptTokens: int64(r.estTokens)}
	if r.parser != nil {
		bpt := r.cfg.Request.BytesPerToken
		if bpt <= 0 {
			bpt = 4
		}
		u.CompletionTokens = int64(float64(r.parser.DeliveredContentBytes())/bpt + 0.999)
	}
	return u
}
