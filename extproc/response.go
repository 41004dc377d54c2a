package extproc

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

var removeAttemptHeaders = []string{contract.HeaderBackend, contract.HeaderUpstreamKey, contract.HeaderLocal}

// bodyReply is the stream's reusable response-body answer; replaceChunk
// is the name translation.go uses.
type bodyReply struct{ envoymsg.BodyReply }

func (b *bodyReply) replaceChunk(out []byte) { b.Replace(out) }

// responseHeaders reads the answer's status, type and attempt tags,
// replaces an answer that must not reach the client as it is, and sets up
// reading the body (usage, translation, model names).
func (s *Server) responseHeaders(r *routerStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	rh := r.readResponseHeaders(h)
	if r.f.Admitted && !rh.local {
		if e := s.replaceAnswer(r, rh.limited, rh.reset); e != nil {
			// The answer is not one to pass on: send the client an error in
			// its own shape. Envoy's upstream timeout cut an attempt the
			// provider had and worked on (a connect failure is a 503): it
			// is billed as a cut answer (bill_on_disconnect), for the
			// provider bills it too; the rest are not served. The router's
			// timeout reply has a body ("upstream request timeout",
			// router.cc); an ext_proc filter's own message timeout (a key
			// pick that never ended: nothing was sent) is an empty reply,
			// its headers the end of the stream (http/utility.cc
			// encodeLocalReply).
			s.finish(r, r.backend == "" && r.status == http.StatusGatewayTimeout && !h.GetEndOfStream())
			return r.answerError(e)
		}
	}
	translating, renaming := s.startBody(r, rh)
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
	if translating && r.f.Shape == family.Anthropic && r.status == http.StatusServiceUnavailable {
		// The translated body says overloaded_error; Anthropic's status
		// for it is 529, which its clients tell from an outage.
		a.Set(":status", strconv.Itoa(family.StatusOverloaded))
	}
	if h.GetEndOfStream() {
		s.finish(r, false)
		if md := r.metadata(); md != nil {
			resp.DynamicMetadata = md
		}
	}
	return resp
}

// responseHeaderFacts is what the response headers say beyond the stream's
// answer state.
type responseHeaderFacts struct {
	ctype, cenc    string
	local, limited bool // an upstream filter's local reply; the rate-limit filter's 429
	reset          int  // x-ratelimit-reset
}

// readResponseHeaders reads the status and the attempt's tags into the
// stream, the rest into the result.
func (r *routerStream) readResponseHeaders(h *extprocv3.HttpHeaders) responseHeaderFacts {
	var rh responseHeaderFacts
	for _, kv := range h.GetHeaders().GetHeaders() {
		switch kv.GetKey() {
		case ":status":
			r.status, _ = strconv.Atoi(envoymsg.HeaderValue(kv))
		case "content-type":
			rh.ctype = envoymsg.HeaderValue(kv)
		case "content-encoding":
			rh.cenc = envoymsg.HeaderValue(kv)
		case contract.HeaderBackend:
			r.backend = envoymsg.HeaderValue(kv)
		case contract.HeaderUpstreamKey:
			r.upstreamKey = envoymsg.HeaderValue(kv)
		case contract.HeaderLocal:
			rh.local = true
		case "x-envoy-ratelimited":
			rh.limited = true
		case "x-ratelimit-reset":
			rh.reset, _ = strconv.Atoi(envoymsg.HeaderValue(kv))
		case contract.HeaderRequestID, headerAnthropicRequestID:
			// The provider's own id, replaced on the answer by the
			// gateway's: kept for the access log (a support ticket with
			// the provider quotes it).
			if r.upstreamRequestID == "" {
				r.upstreamRequestID = label(envoymsg.HeaderValue(kv))
			}
		}
	}
	return rh
}

// startBody sets up reading the answer's body: its kind, decoding, the
// usage parser and filter of a 2xx stream, translation into the client's
// family and renaming the model.
func (s *Server) startBody(r *routerStream, rh responseHeaderFacts) (translating, renaming bool) {
	switch {
	case strings.HasPrefix(rh.ctype, "text/event-stream"):
		r.kind = bodySSE
	case strings.HasPrefix(rh.ctype, "application/json"):
		r.kind = bodyJSON
	default:
		r.kind = bodyOther
	}
	translating = r.f.Admitted && !rh.local && s.startTranslation(r)
	if translating && strings.EqualFold(rh.cenc, "gzip") && (r.status < 200 || r.status >= 300) {
		// The translator reads plain bytes, error bodies too.
		r.gzip = true
		r.decoder = s.opts.Usage.NewGzip()
	}
	if r.f.Admitted && r.status >= 200 && r.status < 300 {
		switch {
		case strings.EqualFold(rh.cenc, "gzip"):
			r.gzip = true
			r.decoder = s.opts.Usage.NewGzip()
		case rh.cenc != "" && !strings.EqualFold(rh.cenc, "identity"):
			r.kind, r.unreadable = bodyOther, true // cannot read usage from it
		}
		if r.kind == bodySSE {
			s.startUsageStream(r)
		}
	}
	if translating {
		// The translator writes plain bytes; its answer has another length.
		r.filter = nil
	}
	renaming = r.f.Admitted && !rh.local && s.startNaming(r, translating)
	return translating, renaming
}

// startUsageStream sets up the pooled stream's SSE parser and, when the
// gateway asked for usage the client did not, its filter; reset, their
// buffers serve request after request.
func (s *Server) startUsageStream(r *routerStream) {
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
				if md := s.streamMetadata(r); md != nil {
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
			if r.jsonOverflow || len(r.jsonBuf)+len(plain) > maxUsageJSON {
				// Too large to keep: its tail, where the usage is.
				r.jsonOverflow, r.jsonBuf = true, keepTail(r.jsonBuf, plain, usageTail)
			} else {
				r.jsonBuf = append(r.jsonBuf, plain...)
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

// keepTail appends more to buf and keeps only the last n bytes.
func keepTail(buf, more []byte, n int) []byte {
	if len(more) >= n {
		return append(buf[:0], more[len(more)-n:]...)
	}
	if drop := len(buf) + len(more) - n; drop > 0 {
		buf = buf[:copy(buf, buf[drop:])]
	}
	return append(buf, more...)
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
//
// When a TPM window is charged at stream end (chargedAtStreamEnd), a stream
// whose usage is not reported yet (none so far, or Anthropic's provisional
// message_start) sends what was
// delivered, estimated, as it grows (by an eighth, at least 64 tokens) and
// when its last event is read: a stream Envoy destroyed before its end (the
// client gone, or closing at [DONE] of a stream without a usage chunk) was
// charged to the rate limits as nothing, or as message_start's one output
// token, while the ledger billed what was delivered.
func (s *Server) streamMetadata(r *routerStream) *structpb.Struct {
	if r.status < 200 || r.status >= 300 || !r.f.Spec.Billed {
		return nil
	}
	u, ok := r.parser.Usage()
	if (!ok || r.parser.Provisional()) && chargedAtStreamEnd(r.cfg) {
		est := s.delivered(r)
		if ok {
			est = s.deliveredOutput(r, u)
		}
		step := max(64, r.sentUsage.CompletionTokens/8)
		if est.PromptTokens == r.sentUsage.PromptTokens && est.CompletionTokens < r.sentUsage.CompletionTokens+step && !r.parser.Done() {
			est = r.sentUsage // not grown enough to send
		}
		u, ok = est, true
	}
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

// chargedAtStreamEnd reports whether some TPM window takes the stream's
// tokens from Envoy's stream-end call: all of them with token_limits
// ratelimit, the sub-keys' and their minters' in both modes.
func chargedAtStreamEnd(cfg *config.Config) bool {
	return cfg.Accounting.TokenLimits == "ratelimit" || cfg.Subkeys.Enabled
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
		on := "tenant `" + r.f.Tenant() + "`"
		if hasOwnLimits(r.f.Owner.Key) {
			// A sub-key with limits of its own: either may have refused.
			on += " or key `" + r.f.KeyID() + "`"
		}
		if parent, _ := parentLimits(r.f.Owner); parent != "" {
			on += " or its minting key `" + parent + "`"
		}
		e := &apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded",
			message: "Rate limit reached for `" + r.f.Alias + "` on " + on + "; retry after the indicated time."}
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
