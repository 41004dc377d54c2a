package extproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/identity"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// maxUsageJSON is how much of a non-streamed JSON response is kept to read
// its usage; bodies pass through untouched either way.
const maxUsageJSON = 8 << 20

type bodyKind uint8

const (
	bodyOther bodyKind = iota
	bodyJSON
	bodySSE
)

// routerStream is the state of one router-level stream (one request). It
// is pooled: reset clears it for the next request.
type routerStream struct {
	cfg *config.Config
	// traceparent/tracestate join the request's trace (W3C, as Envoy's
	// OpenTelemetry tracer sends them); span is set once admitted.
	traceparent, tracestate string
	span                    trace.Span
	owner                   config.KeyOwner
	path                    string

	// requestID is the gateway's identity for this request, minted at
	// admission; clientID is the x-request-id it arrived with (a label).
	requestID string
	clientID  string
	rawPath   string // :path as the client sent it, query included
	sticky    string
	model     *config.Model
	alias     string
	backends  []string
	// pinned is the backend and key that created the request's
	// previous_response_id (Responses API); zero when none.
	pinned ResponseOwner
	// spec is the request's API family (extproc/family); shape the error
	// shape refusals use (Anthropic's under /v1/messages, also before the
	// Spec is known).
	spec  *family.Spec
	shape family.ErrorShape
	// anthropicVersion/-Beta are the client's headers, carried in the
	// admission so each attempt sets them for Anthropic-style backends only.
	anthropicVersion, anthropicBeta string

	stream       bool
	clientUsage  bool // the client asked for include_usage itself
	estTokens    int
	maxOut       int
	reservation  Reservation
	reserved     bool
	reqBody      []byte // accumulated when Envoy splits a body
	spliced      []byte // the body with include_usage, sent back; reused
	admitted     bool
	finished     bool
	status       int
	kind         bodyKind
	gzip         bool
	hideUsage    bool
	backend      string
	upstreamKey  string
	jsonBuf      []byte
	jsonOverflow bool
	parser       UsageStream
	filter       ChunkFilter
	decoder      Decoder
	usage        Usage
	haveUsage    bool
	sentUsage    Usage               // the stream's usage as last sent to Envoy before its end
	reply        *bodyReply          // kept across pooled uses
	ans          *envoymsg.Answer    // kept across pooled uses
	meta         *envoymsg.TokenMeta // kept across pooled uses
	reqMeta      *requestMeta        // kept across pooled uses
	ownParser    UsageStream         // kept across pooled uses; parser when SSE
	ownFilter    ChunkFilter         // kept across pooled uses; filter when hiding usage
	// upstreamModel is the model the answering backend was asked for (the
	// target's model, else the alias); names renames it in the answer to
	// the alias unless the backend exposes it (modelname.go).
	upstreamModel string
	// upstreamRequestID is the id the answering provider gave its answer
	// (x-request-id or request-id), for the access log.
	upstreamRequestID string
	names             *modelNamer
	ownNames          *modelNamer // kept across pooled uses
	// tr translates the answer of a backend of another family into the
	// client's (translation.go); trPair names the pair for metrics.
	tr       translate.Response
	trPair   *translate.Translator
	trOut    []byte // kept across pooled uses
	trFailed bool
	// echo is the client's body, kept for an answer that repeats its
	// request (a Responses request a backend may take translated).
	echo       []byte
	start      time.Time // request headers seen
	firstChunk time.Time // first response body bytes (TTFT of streams)
}

func (r *routerStream) reset() {
	buf, jb, sp := r.reqBody[:0], r.jsonBuf[:0], r.spliced[:0]
	bk, to, echo := r.backends[:0], r.trOut[:0], r.echo[:0]
	if cap(echo) > 64<<10 {
		echo = nil // a large body's buffer is not kept for the next request
	}
	*r = routerStream{reqBody: buf, jsonBuf: jb, spliced: sp, backends: bk, reply: r.reply, ans: r.ans, meta: r.meta,
		reqMeta: r.reqMeta, ownParser: r.ownParser, ownFilter: r.ownFilter, ownNames: r.ownNames, trOut: to, echo: echo}
}

// answer is the stream's reusable answer (see answer).
func (r *routerStream) answer() *envoymsg.Answer {
	if r.ans == nil {
		r.ans = &envoymsg.Answer{}
	}
	return r.ans
}

func (s *Server) serveRouter(st extprocv3.ExternalProcessor_ProcessServer) error {
	r := s.routers.Get().(*routerStream)
	r.reset()
	r.cfg = s.cfg.Load()
	defer func() {
		if cap(r.reqBody) > 1<<20 {
			r.reqBody = nil // do not pin huge buffers in the pool
		}
		if cap(r.jsonBuf) > 1<<20 {
			r.jsonBuf = nil
		}
		if cap(r.spliced) > 1<<20 {
			r.spliced = nil
		}
		s.routers.Put(r)
	}()
	ctx := st.Context()
	for {
		req, err := st.Recv()
		if err != nil {
			// The stream ended before the response's end_of_stream: client
			// disconnect, upstream reset, or a local reply. Still account.
			if r.admitted && r.status == 0 && !r.finished {
				// No response headers at all: the client went away while
				// the upstream had not answered (an upstream failure
				// reaches this filter as Envoy's 503 or a retry's answer).
				// Its attempt, ending unanswered too, is not the key's fault.
				s.opts.Keys.Cancelled(r.requestID)
			}
			s.finish(r, true)
			if streamEnded(err) {
				return nil
			}
			return err
		}
		start := time.Now()
		resp := s.handleRouter(ctx, r, req)
		s.opts.Metrics.ObservePhase(telemetry.FilterRouter, phase(req), time.Since(start))
		if err := st.Send(resp); err != nil {
			s.finish(r, true)
			return nil
		}
	}
}

// handleRouter answers one message; it never returns nil.
func (s *Server) handleRouter(ctx context.Context, r *routerStream, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return s.requestHeaders(r, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return s.requestBody(ctx, r, v.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return s.responseHeaders(r, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return s.responseBody(r, v.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return envoymsg.Continue(envoymsg.RequestTrailers)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return envoymsg.Continue(envoymsg.ResponseTrailers)
	}
	return s.refuse(r, &apiError{status: http.StatusInternalServerError, message: "unexpected ext_proc message", typ: "server_error", code: "internal_error"})
}

func (s *Server) refuse(r *routerStream, e *apiError) *extprocv3.ProcessingResponse {
	s.metrics.refusals.WithLabelValues(e.code).Inc()
	tenant, key := "", ""
	if r.owner.Tenant != nil {
		tenant, key = r.owner.Tenant.Name, r.owner.Key.ID
	}
	if s.opts.Refusals != nil {
		s.opts.Refusals.Refused(tenant, r.alias, e.status, e.code, e.message)
	}
	model := ""
	if r.model != nil {
		model = r.model.Name
	}
	s.opts.Metrics.ObserveRequest(telemetry.Completion{Labels: telemetry.Labels{Tenant: tenant, Model: model}, Status: e.status,
		Latency: time.Since(r.start)})
	s.opts.AccessLog.Log(telemetry.RequestLog{RequestID: r.requestID, ClientRequestID: r.clientID, Tenant: tenant, VirtualKeyID: key,
		Model: r.alias, Status: e.status, Latency: time.Since(r.start), Reason: e.code})
	r.finished = !r.reserved // nothing to settle unless reserved
	return r.answerError(e)
}

// withRequestID adds the request id to a local answer.
func (r *routerStream) withRequestID(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	return envoymsg.AddHeader(resp, requestIDHeader(r.shape), r.requestID)
}

// answerError is e as the client's answer: in its family's shape, with the
// request id.
func (r *routerStream) answerError(e *apiError) *extprocv3.ProcessingResponse {
	return e.in(r.shape).withHeader(requestIDHeader(r.shape), r.requestID).response()
}

func phase(req *extprocv3.ProcessingRequest) telemetry.Phase {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return telemetry.PhaseRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		return telemetry.PhaseRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return telemetry.PhaseRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return telemetry.PhaseResponseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		return telemetry.PhaseResponseBody
	}
	return telemetry.PhaseResponseTrailers
}

func (s *Server) requestHeaders(r *routerStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	r.start = time.Now()
	// The gateway's own identity keys the reservation, the ledger, the
	// settle and the key pool's per-request records (a client's reused
	// x-request-id must not make two requests one), and every answer
	// carries it, refusals included, so what a client quotes finds the
	// access log line, the trace and the ledger entry.
	r.requestID = identity.NewRequestID()
	var method, auth, apiKey, contentLength string
	a := r.answer()
	resp, _ := a.Start(envoymsg.RequestHeaders)
	stickyName := strings.ToLower(r.cfg.Request.StickyHeader)
	for _, kv := range h.GetHeaders().GetHeaders() {
		k := kv.GetKey()
		switch {
		case k == ":method":
			method = envoymsg.HeaderValue(kv)
		case k == ":path":
			r.rawPath = envoymsg.HeaderValue(kv)
		case k == "authorization":
			auth = envoymsg.HeaderValue(kv)
			a.Remove(k)
		case k == "x-api-key":
			apiKey = envoymsg.HeaderValue(kv)
			a.Remove(k)
		case k == "content-length":
			contentLength = envoymsg.HeaderValue(kv)
		case k == contract.HeaderRequestID:
			r.clientID = label(envoymsg.HeaderValue(kv))
		case k == "anthropic-version":
			r.anthropicVersion = label(envoymsg.HeaderValue(kv))
		case k == "anthropic-beta":
			r.anthropicBeta = label(envoymsg.HeaderValue(kv))
		case k == "traceparent":
			r.traceparent = envoymsg.HeaderValue(kv)
		case k == "tracestate":
			r.tracestate = envoymsg.HeaderValue(kv)
		case k == stickyName && stickyName != "":
			r.sticky = label(envoymsg.HeaderValue(kv))
		case isInternal(k):
			// Strip every client-supplied internal header first: none of
			// them may be spoofed.
			a.Remove(k)
		}
	}
	r.path = r.rawPath
	if i := strings.IndexByte(r.path, '?'); i >= 0 {
		r.path = r.path[:i]
	}
	r.shape = family.ShapeForPath(r.path)
	r.spec = family.ForPath(r.path)
	key := bearer(auth)
	if key == "" {
		key = strings.TrimSpace(apiKey)
	}
	if key == "" {
		return s.refuse(r, errInvalidKey("You didn't provide an API key. Provide it as Authorization: Bearer <key>."))
	}
	owner, ok := r.cfg.LookupKey(key)
	if !ok {
		return s.refuse(r, errInvalidKey("Incorrect API key provided."))
	}
	if owner.Key.Revoked {
		return s.refuse(r, errInvalidKey("This API key has been revoked."))
	}
	r.owner = owner

	switch {
	case r.spec == nil:
		return s.refuse(r, &apiError{status: http.StatusNotFound, message: "Unknown request URL: " + method + " " + r.path, typ: "invalid_request_error", code: "unknown_url"})
	case method != r.spec.Method:
		return s.refuse(r, &apiError{status: http.StatusMethodNotAllowed, message: "Use " + r.spec.Method + " for " + r.path, typ: "invalid_request_error", code: "method_not_allowed"})
	case r.spec.Local:
		return s.models(r)
	}
	limit := int64(r.cfg.Request.MaxBodyBytes)
	if n, err := strconv.ParseInt(contentLength, 10, 64); err == nil && n > limit {
		return s.refuse(r, errTooLarge(limit))
	}
	if h.GetEndOfStream() {
		return s.refuse(r, errBadRequest("The request has no body; send a JSON object.", "invalid_json", ""))
	}
	return resp
}

func errTooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
		message: "Request body too large: the limit is " + strconv.FormatInt(limit, 10) + " bytes."}
}

func (s *Server) requestBody(ctx context.Context, r *routerStream, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	limit := int64(r.cfg.Request.MaxBodyBytes)
	body := b.GetBody()
	if !b.GetEndOfStream() || len(r.reqBody) > 0 {
		// Not BUFFERED as configured: collect pieces until the end.
		if int64(len(r.reqBody)+len(body)) > limit {
			return s.refuse(r, errTooLarge(limit))
		}
		r.reqBody = append(r.reqBody, body...)
		if !b.GetEndOfStream() {
			return envoymsg.Continue(envoymsg.RequestBody)
		}
		body = r.reqBody
	}
	if int64(len(body)) > limit {
		return s.refuse(r, errTooLarge(limit))
	}
	if r.owner.Tenant == nil {
		// Headers were refused or never seen; Envoy should not send a body.
		return s.refuse(r, errInvalidKey("You didn't provide an API key."))
	}
	cr, err := chatreq.Scan(body)
	if err != nil {
		return s.refuse(r, scanError(err))
	}
	alias := cr.Model
	r.alias = alias
	model, ok := r.cfg.Model(alias)
	if !ok {
		return s.refuse(r, errModelNotFound(alias))
	}
	tenant := r.owner.Tenant
	if !tenant.Allows(alias) {
		return s.refuse(r, &apiError{status: http.StatusForbidden, typ: "invalid_request_error", code: "model_not_allowed", param: "model",
			message: "Your API key may not use the model `" + alias + "`."})
	}
	if r.spec.Validate != nil {
		if f := r.spec.Validate(cr); f != nil {
			return s.refuse(r, errBadRequest(f.Message, f.Code, f.Param))
		}
	}
	if r.spec == family.Responses && cr.PreviousResponse != "" {
		o, e := s.previousOwner(ctx, r, cr.PreviousResponse, model)
		if e != nil {
			return s.refuse(r, e)
		}
		r.pinned = o
	}
	r.model = model
	r.stream = cr.Stream
	r.clientUsage = cr.IncludeUsage
	r.estTokens = cr.EstimatePromptTokens(r.cfg.Request.BytesPerToken)
	r.maxOut = cr.MaxTokens
	switch {
	case r.spec.NoOutput:
		r.maxOut = 0
	case r.maxOut == 0:
		r.maxOut = r.cfg.Request.DefaultMaxOutputTokens
	}
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

	// Admission: keys, budget, token reservation.
	if refusal := s.admitKeys(ctx, r); refusal != nil {
		return refusal
	}
	reserving := r.cfg.Accounting.TokenLimits == "reserve" && s.opts.Reserver != nil && r.spec.Billed
	// With reservations the money hold covers the hard cap atomically;
	// otherwise check the month's spend.
	if !reserving && r.spec.Billed && tenant.Budget != nil && tenant.Budget.HardCap && s.opts.Budgets != nil {
		bs, err := s.opts.Budgets.Check(ctx, tenant.Name)
		switch {
		case err != nil:
			s.metrics.accountingErr.WithLabelValues("budget").Inc()
			s.log.Warn("budget check failed", "tenant", tenant.Name, "err", err, "policy", r.cfg.FailureModes.Budget)
			if r.cfg.FailureModes.Budget == config.FailClosed {
				return s.refuse(r, errUnavailable("budget"))
			}
		case bs.Exhausted:
			return s.refuse(r, (&apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: "budget_exceeded",
				message: "Tenant `" + tenant.Name + "` has used its monthly budget of " + strconv.FormatFloat(bs.Limit, 'f', 2, 64) + " " +
					r.cfg.Accounting.Currency + "."}).withRetryAfter(bs.RetryAfter))
		}
	}
	if reserving {
		rreq := ReserveRequest{RequestID: r.requestID, Tenant: tenant.Name, KeyID: r.owner.Key.ID,
			Model: alias, PromptTokens: r.estTokens, MaxOutputTokens: r.maxOut, Price: dearest(model, r.backends)}
		res, err := s.opts.Reserver.Reserve(ctx, rreq)
		if err == nil && !res.Granted && !res.Budget {
			// A TPM window may free within the request's wait (queue.go).
			res, err = s.reserveQueued(ctx, r, rreq, res)
		}
		switch {
		case err != nil:
			// The reserver applies failure_modes.reservation itself: an
			// error is a fail-closed refusal.
			s.metrics.accountingErr.WithLabelValues("reserve").Inc()
			s.log.Warn("token reservation failed", "tenant", tenant.Name, "err", err)
			return s.refuse(r, errUnavailable("token reservation"))
		case !res.Granted && res.Budget:
			return s.refuse(r, (&apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: "budget_exceeded",
				message: "Tenant `" + tenant.Name + "` has used its monthly budget."}).withRetryAfter(res.RetryAfter))
		case !res.Granted:
			e := (&apiError{status: http.StatusTooManyRequests, typ: "tokens", code: "rate_limit_exceeded",
				message: "Rate limit reached for `" + alias + "` (tokens per minute, " + res.Scope + " limit) on tenant `" + tenant.Name +
					"`: limit " + strconv.FormatInt(res.Limit, 10) + ", remaining " + strconv.FormatInt(res.Remaining, 10) +
					", requested " + strconv.Itoa(need) + "."}).withRetryAfter(res.RetryAfter)
			e.withHeader("x-ratelimit-limit-tokens", strconv.FormatInt(res.Limit, 10)).
				withHeader("x-ratelimit-remaining-tokens", strconv.FormatInt(res.Remaining, 10)).
				withHeader("x-ratelimit-reset-tokens", res.Reset.Round(time.Millisecond).String())
			return s.refuse(r, e)
		default:
			r.reservation = res
			r.reserved = true
		}
	}
	r.admitted = true
	s.metrics.admittedFor(tenant.Name, alias).requests.Inc()
	if s.opts.Tracer != nil {
		s.startSpan(r, cr, tenant.Name)
	}

	long := (cr.HasTools && r.cfg.Request.LongWhenTools) || (cr.MaxTokens >= r.cfg.Request.LongMaxTokens && r.cfg.Request.LongMaxTokens > 0) || model.LongRunning
	sticky := r.sticky
	if sticky == "" && tenant.Sticky {
		sticky = tenant.Name + "/" + r.owner.Key.ID
	}
	a := r.answer()
	resp, cresp := a.Start(envoymsg.RequestBody)
	// Headers carry only what the route match needs (clear_route_cache
	// acts only with a header mutation in the same answer:
	// processor_state.cc clearRouteCache, Envoy 1.38). Everything later
	// stages read travels as dynamic metadata, because the upstream
	// filters of every attempt share and mutate one header map.
	cresp.ClearRouteCache = true
	a.Set(contract.HeaderPool, pool)
	if long {
		a.Set(contract.HeaderLong, "1")
	}
	bodyBytes := len(body)
	backends := r.cfg.TargetBackends(alias)
	if fits < len(model.Targets) || familyPool || r.pinned.Backend != "" {
		backends = strings.Join(r.backends, ",")
	}
	if r.stream && !r.clientUsage && r.spec.InjectUsage {
		// Positions from the Scan above: no second pass. The answer is
		// encoded before Send returns, so the stream's buffer is reused.
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
		requestID: r.requestID, tenant: tenant.Name, virtualKey: r.owner.Key.ID, model: alias,
		estTokens: r.estTokens, maxTokens: r.maxOut, sticky: stickyValue(sticky), path: r.rawPath, backends: backends,
		bodyBytes: bodyBytes, issued: s.opts.Now().Unix(), reservation: r.reservation.ID,
		anthropicVersion: r.anthropicVersion, anthropicBeta: r.anthropicBeta, key: r.pinned.KeyID,
	})
	return resp
}

func errUnavailable(what string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "accounting_unavailable",
		message: "The gateway cannot check the " + what + " right now; retry later."}
}

// dearest is the highest price among the targets on the backends.
func dearest(m *config.Model, backends []string) config.Price {
	var p config.Price
	for _, t := range m.Targets {
		if !slices.Contains(backends, t.Backend) {
			continue
		}
		if t.Price.InputPerMTok+t.Price.OutputPerMTok > p.InputPerMTok+p.OutputPerMTok {
			p = t.Price
		}
	}
	return p
}

func maxWindow(m *config.Model) int {
	w := 0
	for _, t := range m.Targets {
		w = max(w, t.ContextWindow)
	}
	return w
}

// stickyValue bounds the stickiness key; long values are hashed.
func stickyValue(v string) string {
	if len(v) <= 128 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h:" + hex.EncodeToString(sum[:16])
}

func scanError(err error) *apiError {
	var se *chatreq.SyntaxError
	var fe *chatreq.FieldError
	switch {
	case errors.As(err, &se):
		return errBadRequest("We could not parse the JSON body of your request: "+se.Error()+".", "invalid_json", "")
	case errors.As(err, &fe):
		return errBadRequest(fe.Error()+".", "invalid_value", fe.Field)
	case errors.Is(err, chatreq.ErrNoModel), errors.Is(err, chatreq.ErrModelType), errors.Is(err, chatreq.ErrDuplicateModel):
		return errBadRequest(err.Error()+".", "invalid_value", "model")
	}
	return errBadRequest(err.Error()+".", "invalid_json", "")
}

// models answers GET /v1/models (and /v1/models/{id}) with the aliases the
// caller may use, in OpenAI's list shape, or Anthropic's when the caller
// sends anthropic-version (its SDKs always do).
func (s *Server) models(r *routerStream) *extprocv3.ProcessingResponse {
	t := r.owner.Tenant
	if r.anthropicVersion != "" {
		r.shape = family.Anthropic
	}
	one := strings.TrimPrefix(r.path, "/v1/models/")
	if r.path == "/v1/models" {
		one = ""
	}
	items := make([]byte, 0, 256)
	n := 0
	first, last := "", ""
	for i := range r.cfg.Models {
		m := &r.cfg.Models[i]
		if !t.Allows(m.Name) || (one != "" && m.Name != one) {
			continue
		}
		if n > 0 {
			items = append(items, ',')
		}
		if n == 0 {
			first = m.Name
		}
		n++
		last = m.Name
		items = r.shape.AppendModel(items, m.Name)
	}
	b := items
	if one == "" {
		b = r.shape.AppendList(make([]byte, 0, len(items)+96), items, first, last)
	} else if n == 0 {
		return s.refuse(r, errModelNotFound(one))
	}
	r.finished = true
	return envoymsg.Immediate(http.StatusOK, []envoymsg.Header{{Key: requestIDHeader(r.shape), Value: r.requestID}}, b, "")
}
