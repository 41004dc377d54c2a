package extproc

import (
	"context"
	"net/http"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// maxUsageJSON is how much of a non-streamed JSON response is kept to read
// its usage; bodies pass through untouched either way.
const maxUsageJSON = 8 << 20

// usageTail is how much of the end of a larger one is kept: its usage
// member closes the body (providers put it last but for a few scalars).
const usageTail = 64 << 10

type bodyKind uint8

const (
	bodyOther bodyKind = iota
	bodyJSON
	bodySSE
)

// routerStream is the Envoy side of one router-level stream (one request):
// the config snapshot, the request's facts (f, filled by the admission
// steps of extproc/admit), the body buffers, the answer being read and
// the reusable messages. It is pooled: reset clears it for the next
// request.
type routerStream struct {
	cfg *config.Config
	f   admit.Facts
	answerState
	kept

	// traceparent/tracestate join the request's trace (W3C, as Envoy's
	// OpenTelemetry tracer sends them); span is set once admitted.
	traceparent, tracestate string
	span                    trace.Span
	start                   time.Time // request headers seen
	finished                bool      // accounted (or nothing to account)

	reqBody []byte // accumulated when Envoy splits a body
	spliced []byte // the body with include_usage, sent back; reused
	// echo is the client's body, kept for an answer that repeats its
	// request (a Responses request a backend may take translated).
	echo []byte
}

// answerState is what the stream reads from the upstream's answer.
type answerState struct {
	status       int
	kind         bodyKind
	gzip         bool
	hideUsage    bool // the usage chunk the client did not ask for is cut
	backend      string
	upstreamKey  string
	jsonBuf      []byte
	jsonOverflow bool
	// unreadable: the answer's content-encoding is one the gateway does
	// not decode (a provider that ignored accept-encoding).
	unreadable bool
	parser     UsageStream
	filter     ChunkFilter
	decoder    Decoder
	usage      Usage
	haveUsage  bool
	sentUsage  Usage     // the stream's usage as last sent to Envoy before its end
	firstChunk time.Time // first response body bytes (TTFT of streams)
	// upstreamModel is the model the answering backend was asked for (the
	// target's model, else the alias); names renames it in the answer to
	// the alias unless the backend exposes it (modelname.go).
	upstreamModel string
	// upstreamRequestID is the id the answering provider gave its answer
	// (x-request-id or request-id), for the access log.
	upstreamRequestID string
	names             *modelNamer
	// tr translates the answer of a backend of another family into the
	// client's (translation.go); trPair names the pair for metrics.
	tr       translate.Response
	trPair   *translate.Translator
	trOut    []byte
	trFailed bool
}

// kept is what a pooled stream keeps across requests: its reusable
// messages, parsers and filters.
type kept struct {
	reply     *bodyReply
	ans       *envoymsg.Answer
	meta      *envoymsg.TokenMeta
	reqMeta   *requestMeta
	ownParser UsageStream // parser when SSE
	ownFilter ChunkFilter // filter when hiding usage
	ownNames  *modelNamer
}

func (r *routerStream) reset() {
	buf, jb, sp := r.reqBody[:0], r.jsonBuf[:0], r.spliced[:0]
	to, echo := r.trOut[:0], r.echo[:0]
	if cap(echo) > 64<<10 {
		echo = nil // a large body's buffer is not kept for the next request
	}
	r.f.Reset()
	*r = routerStream{f: r.f, kept: r.kept, reqBody: buf, spliced: sp, echo: echo,
		answerState: answerState{jsonBuf: jb, trOut: to}}
}

// answer is the stream's reusable answer.
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
			if r.f.Admitted && r.status == 0 && !r.finished {
				// No response headers at all: the client went away while
				// the upstream had not answered (an upstream failure
				// reaches this filter as Envoy's 503 or a retry's answer).
				// Its attempt, ending unanswered too, is not the key's fault.
				s.opts.Keys.Cancelled(r.f.RequestID)
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

// refuse answers the request with e, and counts and logs the refusal.
func (s *Server) refuse(r *routerStream, e *apiError) *extprocv3.ProcessingResponse {
	s.metrics.refusals.WithLabelValues(e.code).Inc()
	f := &r.f
	tenant, key := f.Tenant(), f.KeyID()
	if s.opts.Refusals != nil {
		s.opts.Refusals.Refused(tenant, f.Alias, e.status, e.code, e.message)
	}
	model := ""
	if f.Model != nil {
		model = f.Model.Name
	}
	s.opts.Metrics.ObserveRequest(telemetry.Completion{Labels: telemetry.Labels{Tenant: tenant, Model: model}, Status: e.status,
		Latency: time.Since(r.start)})
	s.opts.AccessLog.Log(telemetry.RequestLog{RequestID: f.RequestID, ClientRequestID: f.ClientID, Tenant: tenant, VirtualKeyID: key,
		Model: f.Alias, Status: e.status, Latency: time.Since(r.start), Reason: e.code})
	r.finished = !f.Reserved // nothing to settle unless reserved
	return r.answerError(e)
}

// refused is refuse for an admission step's refusal.
func (s *Server) refused(r *routerStream, x *admit.Refusal) *extprocv3.ProcessingResponse {
	return s.refuse(r, fromRefusal(x))
}

// withRequestID adds the request id to a local answer.
func (r *routerStream) withRequestID(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	return envoymsg.AddHeader(resp, requestIDHeader(r.f.Shape), r.f.RequestID)
}

// answerError is e as the client's answer: in its family's shape, with the
// request id.
func (r *routerStream) answerError(e *apiError) *extprocv3.ProcessingResponse {
	return e.in(r.f.Shape).withHeader(requestIDHeader(r.f.Shape), r.f.RequestID).response()
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
