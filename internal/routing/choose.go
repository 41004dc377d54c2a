package routing

import (
	"strconv"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// Request is what routing needs to know about a request.
type Request struct {
	// Family is the config family the client speaks (config.Family*).
	Family string
	// Untranslated: only native speakers take it (count_tokens has no
	// equivalent in another family).
	Untranslated bool
	// Need is the prompt estimate plus the output reservation, in tokens.
	Need int
	// Pinned is the backend holding the response a Responses request
	// continues (previous_response_id); "" for none. It must be one of
	// the model's targets serving the family natively and not drained.
	Pinned string
}

// Translatable reports whether the request's body can be expressed for
// the backends that take its family only translated (each once, in
// target order); native says whether some of the model's targets speak
// the family natively (the hosted-tools policy depends on it). Choose
// calls it only when such backends exist; a nil Translatable means the
// body can be. Translating is the caller's business: routing only needs
// the answer. (A parameter of its own, not a Request field: escape
// analysis is field-insensitive, so a closure in Request would be moved
// to the heap because Choose returns the family string.)
type Translatable func(backends []*config.Backend, native bool) error

// Choice is where a request goes.
type Choice struct {
	// Pool names the cluster (Pool.Cluster()): one Plan generated.
	contract.Pool
	// Backends are the backends of the cluster's targets whose context
	// window holds the request, in config order: the ones that may serve
	// it.
	Backends []string
	// Translated: the family's selection holds targets that take the
	// request only translated, so the answer may have to be translated
	// back.
	Translated bool
}

// Reason is why no cluster can take a request.
type Reason uint8

const (
	// NoBackend: no target takes the request's family.
	NoBackend Reason = iota + 1
	// Untranslatable: only translating targets take the family and the
	// body cannot be expressed for them (Refusal.Cause says why).
	Untranslatable
	// ContextTooLong: no target that takes the request has a context
	// window for Request.Need tokens (Refusal.MaxWindow is the largest).
	ContextTooLong
	// Drained: the targets that could take the request are all drained
	// (weight 0): an operator's pause, not a request the model cannot
	// serve.
	Drained
)

// Refusal is a request no cluster can take.
type Refusal struct {
	Reason Reason
	// Cause is what Translatable returned (Untranslatable).
	Cause error
	// MaxWindow is the largest context window of the model's targets
	// (ContextTooLong).
	MaxWindow int
}

func (r *Refusal) Error() string {
	switch r.Reason {
	case NoBackend:
		return "no backend takes the request's API family"
	case Untranslatable:
		return "the request cannot be translated for the backends that take it: " + r.Cause.Error()
	case ContextTooLong:
		return "the request is longer than every context window (largest " + strconv.Itoa(r.MaxWindow) + " tokens)"
	case Drained:
		return "every target that takes the request is drained"
	}
	return "no cluster takes the request"
}

func (r *Refusal) Unwrap() error { return r.Cause }

// Choose picks the cluster of model m for a request, among those Plan
// generates, and the backends in it that may serve the request (appended
// to backends, which may be nil); translatable answers whether the body
// can be translated. A request goes to the whole pool unless
// some targets cannot take it; then to the pool that holds exactly those
// that can, so the answer never depends on which target Envoy picks:
//   - the family's pool when some targets do not take the family, native
//     speakers only when the body cannot be translated for the others;
//   - restricted to the smallest known context window that holds the
//     request, or above every known one when only targets of unknown
//     window do;
//   - the pinned backend's pool, whatever the windows, for a request
//     continuing a previous response on a model of more than one target.
func Choose(cfg *config.Config, m *config.Model, req Request, translatable Translatable, backends []string) (Choice, *Refusal) {
	sel, ch, ref := familySelection(cfg, m, req, translatable)
	if ref != nil {
		return ch, ref
	}
	// Drained targets (weight 0) get no traffic (no locality in their
	// clusters): a request only they could hold went to a cluster with no
	// host and got Envoy's 503 instead of the client's context error.
	minFit, selMax, fit, serving := 0, 0, 0, 0
	for i := range m.Targets {
		t := &m.Targets[i]
		if (req.Pinned != "" && t.Backend != req.Pinned) || !admits(cfg, sel, t) {
			continue
		}
		selMax = max(selMax, t.ContextWindow) // as Plan counts the windows
		if t.Weight <= 0 {
			continue
		}
		serving++
		if fits(t, req.Need) {
			fit++
			backends = append(backends, t.Backend)
			if t.ContextWindow > 0 && (minFit == 0 || t.ContextWindow < minFit) {
				minFit = t.ContextWindow
			}
		}
	}
	switch {
	case serving == 0:
		return ch, &Refusal{Reason: Drained}
	case fit == 0:
		return ch, &Refusal{Reason: ContextTooLong, MaxWindow: maxWindow(m.Targets)}
	}
	switch {
	case req.Pinned != "" && len(m.Targets) > 1:
		sel = contract.Pool{Alias: m.Name, Family: req.Family, Native: true, Backend: req.Pinned}
	case fit < serving:
		if minFit == 0 {
			// Only targets of unknown window fit: above every known one.
			minFit = selMax + 1
		}
		sel.MinContext = minFit
	}
	ch.Pool, ch.Backends = sel, backends
	return ch, nil
}

// familySelection selects the targets that take the request's family:
// the family's pool (natively only when the body cannot be translated, or
// the family has no translation) when that is not every target.
func familySelection(cfg *config.Config, m *config.Model, req Request, translatable Translatable) (sel contract.Pool, ch Choice, ref *Refusal) {
	sel = contract.Pool{Alias: m.Name}
	reach, speaks := count(cfg, m, req.Family)
	native := req.Untranslated
	var cause error
	if !native && speaks < reach && translatable != nil {
		if err := translatable(translating(cfg, m, req.Family), speaks > 0); err != nil {
			native, cause = true, err
		}
	}
	take := reach
	if native {
		take = speaks
	}
	switch {
	case take == 0 && cause != nil:
		return sel, ch, &Refusal{Reason: Untranslatable, Cause: cause}
	case take == 0:
		return sel, ch, &Refusal{Reason: NoBackend}
	case take < len(m.Targets):
		sel.Family, sel.Native = req.Family, native && speaks < reach
	}
	ch.Translated = !native && speaks < reach
	return sel, ch, nil
}

// translating lists the backends of the model that take the family only
// translated, each once, in target order.
func translating(cfg *config.Config, m *config.Model, family string) []*config.Backend {
	var out []*config.Backend
	for i := range m.Targets {
		b, ok := cfg.Backend(m.Targets[i].Backend)
		if !ok {
			continue
		}
		if reach, native := takes(b, family); reach && !native {
			out = append(out, b)
		}
	}
	return out
}
