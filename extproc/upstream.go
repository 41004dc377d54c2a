package extproc

import (
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
	reported bool // the attempt's response headers were reported
	// st is the attempt's stream, for the key pick's timer extension;
	// extended, that it was sent (Envoy honours one per message).
	st       extprocv3.ExternalProcessor_ProcessServer
	extended bool
	scratch  []byte // the decoded admission token; kept across pooled uses
	ans      *envoymsg.Answer
}

// Extend sends override_message_timeout for the message being answered
// (the request headers, while the key pick waits for a paced key's slot),
// once. A failed send means the stream is gone: the pick's wait ends with
// its context.
func (u *upstreamStream) Extend(d time.Duration) {
	if u.extended {
		return
	}
	u.extended = true
	_ = u.st.Send(envoymsg.TimeoutOverride(d))
}

func (s *Server) serveUpstream(st extprocv3.ExternalProcessor_ProcessServer) error {
	u := s.upstreams.Get().(*upstreamStream)
	*u = upstreamStream{cfg: s.cfg.Load(), ans: u.ans, scratch: u.scratch, st: st}
	if u.ans == nil {
		u.ans = &envoymsg.Answer{}
	}
	defer func() {
		u.st = nil // a pooled state keeps no finished stream alive
		s.upstreams.Put(u)
	}()
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
			s.unanswered(ctx, u)
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
			resp = s.upstreamBody(ctx, u, v.RequestBody)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = s.upstreamResponse(ctx, u, v.ResponseHeaders)
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = envoymsg.Continue(envoymsg.ResponseBody)
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = envoymsg.Continue(envoymsg.RequestTrailers)
		default:
			resp = envoymsg.Continue(envoymsg.ResponseTrailers)
		}
		s.opts.Metrics.ObservePhase(telemetry.FilterUpstream, phase(req), time.Since(start))
		if err := st.Send(resp); err != nil {
			// The stream is gone (the client left while the key was
			// picked, most likely): no response headers will come, so
			// the picked key's slot is given back as on a failed Recv,
			// not held until its lease expires.
			s.unanswered(ctx, u)
			return nil
		}
	}
}

// unanswered reports an attempt that got a key and ends without response
// headers. The key pool waits for the router-level stream's Cancelled
// before counting it against the key.
func (s *Server) unanswered(ctx context.Context, u *upstreamStream) {
	if u.keyID == "" || u.reported {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	s.opts.Keys.Unanswered(rctx, u.backend.Name, u.keyID, u.requestID)
	cancel()
}

// notSent releases the attempt's key when the attempt ends here, before
// anything reached the provider: no outcome for its breaker.
func (s *Server) notSent(ctx context.Context, u *upstreamStream) {
	if u.keyID == "" || u.reported {
		return
	}
	s.opts.Keys.Report(ctx, u.backend.Name, u.keyID, u.requestID, s.opts.Keys.ParseOutcome(0, func(string) string { return "" }))
	u.reported = true
}

func (s *Server) upstreamBody(ctx context.Context, u *upstreamStream, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	resp := envoymsg.Continue(envoymsg.RequestBody)
	if !u.rewrite || !b.GetEndOfStream() {
		return resp
	}
	var nb []byte
	var err error
	if u.tr != nil {
		nb, err = s.translateAttempt(u, b.GetBody())
		if err != nil {
			// The router-level filter translated this body once to choose
			// the cluster; only a config change in between gets here.
			s.metrics.untranslatable.Inc()
			// Nothing goes upstream: the key's slot is given back, not
			// left to end unanswered (which counts as the key's reset).
			s.notSent(ctx, u)
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
