package extproc

import (
	"errors"
	"net/http"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/pairs"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
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

// targetSel is the part of a model's targets a request may go to.
type targetSel struct {
	take   int  // targets that may take it
	native bool // only those speaking the family natively
	reach  int  // targets taking the family natively or translated
	speaks int  // targets speaking it natively
}

// takes reports whether a target's backend is in the selection.
func (sel targetSel) takes(cfg *config.Config, spec *family.Spec, backend string) bool {
	b, ok := cfg.Backend(backend)
	if !ok {
		return false
	}
	if sel.native {
		return b.Serves(spec.Name)
	}
	_, ok = translatorFor(b, spec)
	return ok
}

// cluster names the selection's cluster (restricted to targets whose
// context window is at least minContext, when positive), as xds/ir
// familyPools generates it.
func (sel targetSel) cluster(alias, fam string, minContext int) string {
	return contract.PoolFamilyContextCluster(alias, fam, sel.native && sel.speaks < sel.reach, minContext)
}

// hostedPolicy is what a request translated for backend b does with the
// tools b's family cannot run (config hosted_tools). At routing, where
// native says whether the model has targets speaking the client's family,
// native_or_drop refuses when there are some (the request then goes to
// them: familyTargets) and drops otherwise; at an attempt (native false)
// only refuse refuses.
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

// translation is one way a request must be translated for some targets.
type translation struct {
	tr     *translate.Translator
	hosted translate.HostedPolicy
}

// familyTargets selects the targets that can serve the request. When some
// take it only translated, the body is translated once here: a request the
// translator cannot express (hosted tools included, as the backends'
// hosted_tools say) goes to native targets only (or is refused, naming
// the field, when there are none), so the answer does not depend on which
// backend Envoy picks.
func (s *Server) familyTargets(r *routerStream, m *config.Model, body []byte) (targetSel, *translate.Unsupported) {
	var sel targetSel
	for _, t := range m.Targets {
		b, ok := r.cfg.Backend(t.Backend)
		if !ok {
			continue
		}
		if b.Serves(r.spec.Name) {
			sel.speaks++
		}
		// The xDS clusters are built from config alone (b.Route), so count
		// reach the same way, count_tokens included.
		if _, ok := b.Route(r.spec.Name); ok {
			sel.reach++
		}
	}
	if r.spec.Untranslated {
		sel.native, sel.take = true, sel.speaks
		return sel, nil
	}
	var needs []translation
	for _, t := range m.Targets {
		b, ok := r.cfg.Backend(t.Backend)
		if !ok {
			continue
		}
		if tr, ok := translatorFor(b, r.spec); ok && tr != nil {
			need := translation{tr, hostedPolicy(b, sel.speaks > 0)}
			if !slices.Contains(needs, need) {
				needs = append(needs, need)
			}
		}
	}
	if len(needs) > 0 {
		if unsupported := s.untranslatable(r, needs, body); unsupported != nil {
			sel.native, sel.take = true, sel.speaks
			return sel, unsupported
		}
	}
	sel.take = sel.reach
	return sel, nil
}

// untranslatable translates the body once per backend family (and hosted
// tools policy) it must go to, and returns why it cannot be (nil when it
// can).
func (s *Server) untranslatable(r *routerStream, needs []translation, body []byte) *translate.Unsupported {
	for _, n := range needs {
		_, err := n.tr.Request(body, translate.RequestOptions{Model: r.alias, DefaultMaxTokens: r.cfg.Request.DefaultMaxOutputTokens, Hosted: n.hosted})
		if err == nil {
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
	tr, _ := translatorFor(b, r.spec)
	if tr == nil {
		return false
	}
	r.trPair = tr
	r.tr = tr.NewResponse(translate.ResponseOptions{Status: r.status, Stream: r.kind == bodySSE, IncludeUsage: r.clientUsage,
		RequestID: r.requestID, Created: s.opts.Now().Unix(), Request: r.echo})
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
		s.log.Warn("backend answer could not be translated", "request_id", r.requestID, "backend", r.backend,
			"from", r.trPair.To, "to", r.trPair.From, "err", err)
		body := translate.ErrorBody([]byte("The backend's answer could not be translated into this API: "+err.Error()), http.StatusBadGateway, r.shape)
		if r.kind == bodySSE {
			name := ""
			if r.shape == family.Anthropic {
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
