package extproc

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

var removeAttemptHeaders = []string{contract.HeaderBackend, contract.HeaderUpstreamKey, contract.HeaderLocal}

// bodyReply is the stream's reusable response-body answer; replaceChunk
// is the name translation.go uses.
type bodyReply struct{ envoymsg.BodyReply }

func (b *bodyReply) replaceChunk(out []byte) { b.Replace(out) }

func (s *Server) responseHeaders(r *routerStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var ctype, cenc string
	local, limited := false, false
	reset := 0
	for _, kv := range h.GetHeaders().GetHeaders() {
		switch kv.GetKey() {
		case ":status":
			r.status, _ = strconv.Atoi(envoymsg.HeaderValue(kv))
		case "content-type":
			ctype = envoymsg.HeaderValue(kv)
		case "content-encoding":
			cenc = envoymsg.HeaderValue(kv)
		case contract.HeaderBackend:
			r.backend = envoymsg.HeaderValue(kv)
		case contract.HeaderUpstreamKey:
			r.upstreamKey = envoymsg.HeaderValue(kv)
		case contract.HeaderLocal:
			local = true
		case "x-envoy-ratelimited":
			limited = true
		case "x-ratelimit-reset":
			reset, _ = strconv.Atoi(envoymsg.HeaderValue(kv))
		case contract.HeaderRequestID, headerAnthropicRequestID:
			// The provider's own id, replaced on the answer by the
			// gateway's: kept for the access log (a support ticket with
			// the provider quotes it).
			if r.upstreamRequestID == "" {
				r.upstreamRequestID = label(envoymsg.HeaderValue(kv))
			}
		}
	}
	if r.f.Admitted && !local {
		if e := s.replaceAnswer(r, limited, reset); e != nil {
			// The answer is not one to pass on: account the request as not
			// served and send the client an error in its own shape.
			s.finish(r, false)
			return r.answerError(e)
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
	translating := r.f.Admitted && !local && s.startTranslation(r)
	if translating && strings.EqualFold(cenc, "gzip") && (r.status < 200 || r.status >= 300) {
		// The translator reads plain bytes, error bodies too.
		r.gzip = true
		r.decoder = s.opts.Usage.NewGzip()
	}
	if r.f.Admitted && r.status >= 200 && r.status < 300 {
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
	if translating {
		// The translator writes plain bytes; its answer has another length.
		r.filter = nil
	}
	renaming := r.f.Admitted && !local && s.startNaming(r, translating)
	a := r.answer()
	resp, _ := a.Start(envoymsg.ResponseHeaders)
	for _, h := range removeAttemptHeaders {
		a.Remove(h)
	}
	if renaming && r.gzip && !translating {
		a.Remove("content-encoding") // renamed from the decoded bytes
	}
	if r.f.RequestID != "" {
		// One id per answer: the provider's under the other family's
		// name goes too (it is in the access log).
		name := requestIDHeader(r.f.Shape)
		a.Set(name, r.f.RequestID)
		if name == headerAnthropicRequestID {
			a.Remove(contract.HeaderRequestID)
		} else {
			a.Remove(headerAnthropicRequestID)
		}
	}
	if translating && r.decoder != nil {
		a.Remove("content-encoding")
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
	resp := r.reply.Continue()
	if r.f.Admitted && !r.finished {
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
		if r.tr != nil {
			s.translateChunk(r, plain, b.GetEndOfStream())
		}
		switch r.kind {
		case bodySSE:
			if r.parser != nil {
				r.parser.Write(plain)
				if md := r.streamMetadata(); md != nil {
					resp.DynamicMetadata = md
				}
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
		if r.names != nil {
			r.nameChunk(chunk, plain)
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

// startNaming finds the model the answering backend was asked for and,
// when it is not the alias and the backend does not expose it, starts
// renaming it in the answer (modelname.go). A compressed answer is renamed
// from its decoded bytes, which only a 2xx or translated answer has.
func (s *Server) startNaming(r *routerStream, translating bool) bool {
	r.names = nil
	if r.backend == "" || r.f.Model == nil {
		return false
	}
	r.upstreamModel = r.f.Alias
	for i := range r.f.Model.Targets {
		if t := &r.f.Model.Targets[i]; t.Backend == r.backend && t.Model != "" {
			r.upstreamModel = t.Model
		}
	}
	b, ok := r.cfg.Backend(r.backend)
	if r.upstreamModel == r.f.Alias || !ok || b.ExposeUpstreamModel || (r.kind != bodyJSON && r.kind != bodySSE) ||
		(r.gzip && r.decoder == nil && !translating) {
		return false
	}
	if r.ownNames == nil {
		r.ownNames = &modelNamer{}
	}
	r.ownNames.reset(r.f.Alias)
	r.names = r.ownNames
	return true
}

// nameChunk renames the model in what this chunk sends the client: the
// translation or the usage filter's output when they replaced the chunk,
// the decoded bytes of a compressed answer, else the chunk itself.
func (r *routerStream) nameChunk(chunk, plain []byte) {
	src := chunk
	out, replaced := r.reply.Replaced()
	switch {
	case replaced:
		src = out
	case r.gzip:
		src, replaced = plain, true
	}
	if out, changed := r.names.Write(src); changed || replaced {
		r.reply.replaceChunk(out)
	}
}

func (r *routerStream) closeDecoder() {
	if r.decoder != nil {
		_, _ = r.decoder.Close()
		r.decoder = nil
	}
}

// streamMetadata is the token metadata of a 2xx stream whose usage has
// changed with this chunk (a chat stream's usage chunk, Anthropic's
// message_start and message_delta, Responses' response.completed). SDKs
// close the connection at the last event ([DONE]); when the provider's end
// of stream comes later, Envoy destroys the stream before the
// end-of-stream answer, so metadata sent only then never reached the
// rate-limit filter's stream-done charge. The end-of-stream answer still
// sends the final figures.
func (r *routerStream) streamMetadata() *structpb.Struct {
	if r.status < 200 || r.status >= 300 || !r.f.Spec.Billed {
		return nil
	}
	u, ok := r.parser.Usage()
	if !ok {
		return nil
	}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	if u == r.sentUsage {
		return nil
	}
	r.sentUsage = u
	if r.meta == nil {
		r.meta = &envoymsg.TokenMeta{}
	}
	return fillTokens(r.meta, u, r.f.EstTokens)
}

// accounted holds the figures finish computed, for the dynamic metadata.
func (r *routerStream) metadata() *structpb.Struct {
	if !r.f.Admitted || !r.haveUsage {
		return nil
	}
	if r.meta == nil {
		r.meta = &envoymsg.TokenMeta{}
	}
	return fillTokens(r.meta, r.usage, r.f.EstTokens)
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
	if !r.f.Admitted {
		return
	}
	if !r.f.Spec.Billed {
		// count_tokens: admitted and routed, not a completion. Nothing to
		// bill, nothing reserved (admission skipped the reservation).
		s.observe(r, Entry{RequestID: r.f.RequestID, Time: s.opts.Now(), Tenant: r.f.Tenant(), VirtualKeyID: r.f.KeyID(),
			Model: r.f.Alias, UpstreamModel: r.upstreamModel, Backend: r.backend, UpstreamKeyID: r.upstreamKey, Status: r.status, Disconnected: cut})
		return
	}
	ok2xx := r.status >= 200 && r.status < 300
	if cut && ok2xx && r.kind == bodySSE && r.parser != nil {
		// SDKs close the connection once they read the last event; when
		// the provider's end of stream comes later, the stream ends here
		// without it. The client had the whole answer: not a disconnect.
		r.parser.Flush()
		if r.parser.Done() {
			cut = false
		}
	}
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
	if ok2xx && r.f.Spec == family.Responses && r.tr == nil {
		// A translated answer's id is the gateway's: no backend holds it.
		s.rememberResponse(r)
	}
	estimated := false
	if cut {
		s.metrics.disconnects.Inc()
		switch r.cfg.Accounting.BillOnDisconnect {
		case "reserved":
			u, estimated = Usage{PromptTokens: int64(r.f.EstTokens), CompletionTokens: int64(r.f.MaxOut)}, true
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
	tenant, key := r.f.Tenant(), r.f.KeyID()
	if u.TotalTokens > 0 {
		as := s.metrics.admittedFor(tenant, r.f.Alias)
		as.prompt.Add(float64(u.PromptTokens))
		as.completion.Add(float64(u.CompletionTokens))
	}
	e := Entry{RequestID: r.f.RequestID, Time: s.opts.Now(), Tenant: tenant, VirtualKeyID: key, Model: r.f.Alias, UpstreamModel: r.upstreamModel,
		Backend: r.backend, UpstreamKeyID: r.upstreamKey, Status: r.status, Usage: u, Estimated: estimated, Disconnected: cut, Streamed: r.f.Stream}
	served := ok2xx || cut
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
	if r.f.Reserved && s.opts.Reserver != nil {
		// Record first, then settle: spend is never under-counted.
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
func (s *Server) cost(r *routerStream, e Entry) float64 {
	u := pricing.Usage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, TotalTokens: e.Usage.TotalTokens,
		CachedTokens: e.Usage.CachedTokens, ReasoningTokens: e.Usage.ReasoningTokens, CacheWriteTokens: e.Usage.CacheWriteTokens}
	var c pricing.Money
	for _, t := range r.f.Model.Targets {
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

// replaceAnswer decides whether a response must not reach the client as it
// is, and returns the error to send instead (nil: pass it on).
//   - A provider's 401/403 is about our pooled key, not the client's virtual
//     key (which admission accepted). Envoy retried it on other keys; if it
//     still arrives, SDKs would treat "invalid_api_key" as fatal.
//   - The rate-limit filter's 429 has no body and no Retry-After (Envoy
//     sends x-ratelimit-reset only): SDKs back off on Retry-After.
//   - An Envoy local reply (no healthy upstream: the whole pool is down,
//     and pool clusters never panic-route; an overflow; a timeout) has no
//     backend tag: it gets the OpenAI shape and a Retry-After.
func (s *Server) replaceAnswer(r *routerStream, limited bool, reset int) *apiError {
	switch {
	case r.backend == "" && limited && r.status == http.StatusTooManyRequests:
		e := &apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded",
			message: "Rate limit reached for `" + r.f.Alias + "` on tenant `" + r.f.Tenant() + "`; retry after the indicated time."}
		return e.withRetryAfter(time.Duration(max(reset, 1))*time.Second).withHeader("x-ratelimit-reset", strconv.Itoa(max(reset, 1)))
	case r.backend != "" && (r.status == http.StatusUnauthorized || r.status == http.StatusForbidden):
		e := &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "upstream_credentials_rejected",
			message: "The provider refused the gateway's upstream credentials for `" + r.f.Alias + "`; the key is out of rotation. Retry later."}
		_, ra := s.opts.Keys.Available(r.f.Backends)
		return e.withRetryAfter(max(ra, time.Second))
	case r.backend == "" && r.status >= 500:
		ok, ra := s.opts.Keys.Available(r.f.Backends)
		switch {
		case r.status == http.StatusServiceUnavailable && !ok && !s.opts.Keys.Failing(r.f.Backends):
			// No healthy host because every key of the pool is rate
			// limited or busy (EDS follows the keys): capacity comes
			// back, so the answer SDKs back off on.
			return errKeysExhausted(r.f.Alias, ra, false)
		case r.status == http.StatusServiceUnavailable && ok:
			// Envoy had no healthy host while the keys now have room: EDS
			// was behind the keys (a quota window that reset between the
			// push and this answer). Nothing is failing: a short 429.
			return (&apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "upstream_unavailable",
				message: "No upstream for `" + r.f.Alias + "` could take the request at this moment; retry after the indicated time."}).
				withRetryAfter(time.Second)
		case ok:
			ra = time.Second
		}
		msg := "No upstream for `" + r.f.Alias + "` could take the request (every relay is down or failing); retry later."
		code := "upstream_unavailable"
		if r.status == http.StatusGatewayTimeout {
			msg, code = "The upstream for `"+r.f.Alias+"` did not answer in time.", "upstream_timeout"
		}
		return (&apiError{status: r.status, typ: "server_error", code: code, message: msg}).withRetryAfter(max(ra, time.Second))
	}
	return nil
}

// fillTokens is the token metadata of usage u for a request admitted with
// the prompt estimate est: tokens_top_up is the completion plus the prompt
// above the estimate (hits_addend is unsigned, so the estimate can only be
// topped up).
func fillTokens(m *envoymsg.TokenMeta, u Usage, est int) *structpb.Struct {
	topUp := u.CompletionTokens
	if extra := u.PromptTokens - int64(est); extra > 0 {
		topUp += extra
	}
	return m.Fill(u.PromptTokens, u.CompletionTokens, u.TotalTokens, topUp)
}
