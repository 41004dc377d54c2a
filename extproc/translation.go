package extproc

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/pairs"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/routing"
)

// translatorFor is how the backend takes a request of the family: natively
// (nil, true), through a translator (t, true), or not at all. The
// router-level filter (routing, and the answer's half) and every attempt's
// upstream filter (the request's half) decide it the same way from config.
func translatorFor(b *config.Backend, spec *family.Spec) (*translate.Translator, bool) {
	if spec == nil || spec.Name == "" {
		return nil, false
	}
	if b.Serves(spec.Name) {
		return nil, true
	}
	if spec.Untranslated {
		return nil, false
	}
	to, ok := b.Route(spec.Name)
	if !ok {
		return nil, false
	}
	t := pairs.Lookup(spec.Name, to)
	return t, t != nil
}

// hostedPolicy is what a request translated for backend b does with the
// tools b's family cannot run (config hosted_tools). At routing, where
// native says whether the model has targets speaking the client's family,
// native_or_drop refuses when there are some (the request then goes to
// them: route) and drops otherwise; at an attempt (native false) only
// refuse refuses.
func hostedPolicy(b *config.Backend, native bool) translate.HostedPolicy {
	switch b.HostedTools {
	case config.HostedToolsRefuse:
		return translate.RefuseHosted
	case config.HostedToolsDrop:
		return translate.DropHosted
	}
	if native {
		return translate.RefuseHosted
	}
	return translate.DropHosted
}

// translationNeed is one way a request must be translated for some
// targets, with the options of the first of them.
type translationNeed struct {
	tr     *translate.Translator
	hosted translate.HostedPolicy
	model  string // the target's upstream model
	field  string // its backend's max_tokens field
}

// choose chooses the request's cluster and the backends in it that may
// serve it (internal/routing, the plan xds/ir builds the clusters from),
// or answers the refusal. The body is translated once here for the
// backends that take the family only translated: a request the translator
// cannot express (hosted tools included, as the backends' hosted_tools
// say) goes to native targets only, or is refused naming the field when
// there are none, so the answer does not depend on which backend Envoy
// picks.
func (s *Server) choose(r *routerStream, model *config.Model, cr chatreq.Request, body []byte, need int) (contract.Pool, *extprocv3.ProcessingResponse) {
	req := routing.Request{Family: r.f.Spec.Name, Untranslated: r.f.Spec.Untranslated, Need: need, Pinned: r.f.Pinned.Backend}
	ch, refusal := routing.Choose(r.cfg, model, req, func(backends []*config.Backend, native bool) error {
		if un := s.untranslatable(r, backends, native, body); un != nil {
			return un
		}
		return nil
	}, r.f.Backends)
	if refusal != nil {
		return contract.Pool{}, s.refuseRoute(r, model, cr, refusal, need)
	}
	r.f.Backends = ch.Backends
	if r.f.Spec.EchoesRequest && ch.Translated {
		r.echo = append(r.echo[:0], body...)
	}
	return ch.Pool, nil
}

// drainedRetryAfter is what a request only drained targets could take is
// told to wait: a drain is an operator's, of unknown length.
const drainedRetryAfter = 30 * time.Second

// refuseRoute answers a request no cluster can take: count_tokens that no
// backend counts is answered by the gateway's own estimate.
func (s *Server) refuseRoute(r *routerStream, model *config.Model, cr chatreq.Request, refusal *routing.Refusal, need int) *extprocv3.ProcessingResponse {
	switch refusal.Reason {
	case routing.Untranslatable:
		var un *translate.Unsupported
		if !errors.As(refusal.Cause, &un) {
			un = &translate.Unsupported{Message: refusal.Error()}
		}
		return s.refuse(r, errBadRequest(un.Message, "unsupported_parameter", un.Param))
	case routing.Drained:
		// An operator's pause (weight 0 on every target that could take
		// it): the model comes back, so the answer SDKs retry on.
		return s.refuse(r, (&apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "upstream_unavailable",
			message: "No upstream for `" + model.Name + "` takes this request at the moment (its targets are drained); retry later."}).
			withRetryAfter(drainedRetryAfter))
	case routing.ContextTooLong:
		return s.refuse(r, errBadRequest("This model's maximum context length is "+strconv.Itoa(refusal.MaxWindow)+
			" tokens. However, you requested about "+strconv.Itoa(need)+" tokens ("+strconv.Itoa(r.f.EstTokens)+
			" in the messages, "+strconv.Itoa(r.f.MaxOut)+" in the completion). Please reduce the length of the messages or completion.",
			"context_length_exceeded", "messages"))
	}
	if r.f.Spec == family.CountTokens {
		return r.withRequestID(s.countTokensLocally(r, cr))
	}
	return s.refuse(r, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "unsupported_api", param: "model",
		message: "The model `" + model.Name + "` is not served for " + r.f.Spec.Path + " by any of its backends."})
}

// untranslatable translates the body once per translator (and hosted
// tools policy) the backends need, and returns why it cannot be (nil when
// it can). Each translation is made with the options of the first backend
// needing it and kept for that backend's first attempt on this replica
// (translatecache.go).
func (s *Server) untranslatable(r *routerStream, backends []*config.Backend, native bool, body []byte) *translate.Unsupported {
	var buf [4]translationNeed
	needs := buf[:0]
	for _, b := range backends {
		tr, ok := translatorFor(b, r.f.Spec)
		if !ok || tr == nil {
			continue
		}
		hosted := hostedPolicy(b, native)
		if !slices.ContainsFunc(needs, func(n translationNeed) bool { return n.tr == tr && n.hosted == hosted }) {
			needs = append(needs, translationNeed{tr, hosted, upstreamModel(r.f.Model, b.Name, r.f.Alias), b.MaxTokensField})
		}
	}
	hash := uint64(0)
	for _, n := range needs {
		var dropped []string
		out, err := n.tr.Request(body, translate.RequestOptions{Model: n.model, DefaultMaxTokens: r.cfg.Request.DefaultMaxOutputTokens,
			MaxTokensField: n.field, Hosted: n.hosted, Dropped: func(tool string) { dropped = append(dropped, tool) }})
		if err == nil {
			if hash == 0 {
				hash = bodyHash(body)
			}
			s.translations.put(translationKey{requestID: r.f.RequestID, tr: n.tr, model: n.model, maxTokensField: n.field,
				defaultMaxTokens: r.cfg.Request.DefaultMaxOutputTokens, body: hash, size: len(body)}, keptTranslation{out, dropped})
			continue
		}
		s.metrics.untranslatable.Inc()
		var un *translate.Unsupported
		if errors.As(err, &un) {
			return un
		}
		return &translate.Unsupported{Message: "The request cannot be translated for this model's backends: " + err.Error()}
	}
	return nil
}

// upstreamModel is the model name a backend's target of the model gets
// (the attempt reads it from the endpoint's metadata).
func upstreamModel(m *config.Model, backend, alias string) string {
	for i := range m.Targets {
		if m.Targets[i].Backend == backend {
			return cmp.Or(m.Targets[i].Model, alias)
		}
	}
	return alias
}

// translateAttempt translates an attempt's body for its backend, or takes
// the router's translation of the same body with the same options when
// this is the first attempt on this replica to need it.
func (s *Server) translateAttempt(u *upstreamStream, body []byte) ([]byte, error) {
	o := translate.RequestOptions{Model: u.upstreamModel, DefaultMaxTokens: u.cfg.Request.DefaultMaxOutputTokens,
		MaxTokensField: u.backend.MaxTokensField, Hosted: hostedPolicy(u.backend, false), Dropped: func(tool string) {
			u.dropped = translate.AppendDroppedHeader(u.dropped, tool)
			s.metrics.droppedTools.WithLabelValues(u.backend.Name, translate.HostedToolLabel(tool)).Inc()
		}}
	k := translationKey{requestID: u.requestID, tr: u.tr, model: o.Model, maxTokensField: o.MaxTokensField,
		defaultMaxTokens: o.DefaultMaxTokens, body: bodyHash(body), size: len(body)}
	if kept, ok := s.translations.take(k); ok {
		for _, tool := range kept.dropped {
			o.Dropped(tool)
		}
		return kept.body, nil
	}
	return u.tr.Request(body, o)
}

// countTokensLocally answers count_tokens for a model none of whose
// backends speak Anthropic's API (no other family counts tokens): the
// gateway's own prompt estimate, marked as one.
func (s *Server) countTokensLocally(r *routerStream, cr chatreq.Request) *extprocv3.ProcessingResponse {
	est := cr.EstimatePromptTokens(r.cfg.Request.BytesPerToken)
	r.finished = true
	body := strconv.AppendInt([]byte(`{"input_tokens":`), int64(est), 10)
	body = append(body, '}')
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode_OK},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader("content-type", "application/json"), setHeader(contract.HeaderEstimated, "true")}},
		Body: body,
	}}}
}

// startTranslation starts the answer's half when the backend that answered
// takes the request's family only translated.
func (s *Server) startTranslation(r *routerStream) bool {
	if r.backend == "" {
		return false
	}
	b, ok := r.cfg.Backend(r.backend)
	if !ok {
		return false
	}
	tr, _ := translatorFor(b, r.f.Spec)
	if tr == nil {
		return false
	}
	r.trPair = tr
	r.tr = tr.NewResponse(translate.ResponseOptions{Status: r.status, Stream: r.kind == bodySSE, IncludeUsage: r.f.ClientUsage,
		RequestID: r.f.RequestID, Created: s.opts.Now().Unix(), Request: r.echo})
	s.metrics.translated.WithLabelValues(tr.From, tr.To, "response").Inc()
	return true
}

// translateChunk replaces the chunk with its translation. An answer the
// translator cannot read ends in an error in the client's shape: the
// status is already sent.
func (s *Server) translateChunk(r *routerStream, plain []byte, end bool) {
	if r.trFailed {
		r.reply.replaceChunk(r.trOut[:0])
		return
	}
	out, err := r.tr.Write(r.trOut[:0], plain, end)
	if err != nil {
		r.trFailed = true
		s.metrics.translateErr.WithLabelValues(r.trPair.From, r.trPair.To).Inc()
		s.log.Warn("backend answer could not be translated", "request_id", r.f.RequestID, "backend", r.backend,
			"from", r.trPair.To, "to", r.trPair.From, "err", err)
		body := translate.ErrorBody([]byte("The backend's answer could not be translated into this API: "+err.Error()), http.StatusBadGateway, r.f.Shape)
		if r.kind == bodySSE {
			name := ""
			if r.f.Shape == family.Anthropic {
				name = "error"
			}
			out = translate.AppendEvent(out, name, body)
		} else if len(out) == 0 {
			out = append(out, body...)
		}
	}
	if cap(out) <= 1<<20 {
		r.trOut = out
	}
	r.reply.replaceChunk(out)
}
