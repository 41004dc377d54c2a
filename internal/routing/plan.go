package routing

import (
	"slices"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// Pool is one cluster of a model: its selection (and so its name,
// Pool.Cluster()) and the targets it holds, in config order. Drained
// targets (weight 0) are listed: whether a target gets traffic is the
// cluster's business (xds/ir gives it no locality), not routing's.
type Pool struct {
	contract.Pool
	Model   *config.Model
	Targets []config.Target
}

// Plan lists every pool of every model, models in config order:
//   - the whole pool;
//   - per API family that only some targets take, the targets that take
//     it (natively or translated), and the native speakers when others
//     take it only translated; each restricted further by context window
//     over its own targets;
//   - per backend serving the Responses API, for a model of more than one
//     target, that backend's targets (previous_response_id);
//   - the whole pool restricted by context window (contextWindows).
func Plan(cfg *config.Config) []Pool {
	var out []Pool
	for i := range cfg.Models {
		out = append(out, ModelPlan(cfg, &cfg.Models[i])...)
	}
	return out
}

// ModelPlan is Plan for one model.
func ModelPlan(cfg *config.Config, m *config.Model) []Pool {
	out := []Pool{newPool(cfg, m, contract.Pool{Alias: m.Name})}
	for _, sel := range familyPools(cfg, m) {
		out = append(out, newPool(cfg, m, sel))
	}
	for _, b := range affinityBackends(cfg, m) {
		out = append(out, newPool(cfg, m, contract.Pool{Alias: m.Name, Family: config.FamilyResponses, Native: true, Backend: b}))
	}
	for _, w := range contextWindows(m.Targets) {
		out = append(out, newPool(cfg, m, contract.Pool{Alias: m.Name, MinContext: w}))
	}
	return out
}

// newPool selects the targets of one pool.
func newPool(cfg *config.Config, m *config.Model, sel contract.Pool) Pool {
	p := Pool{Pool: sel, Model: m}
	for i := range m.Targets {
		t := &m.Targets[i]
		if admits(cfg, sel, t) && (sel.MinContext <= 0 || fits(t, sel.MinContext)) {
			p.Targets = append(p.Targets, *t)
		}
	}
	return p
}

// contextWindows lists the distinct known context windows of the targets
// above the smallest: one restricted pool each. When some targets have no
// known window, one more, above every known window, holds only those: a
// request too long for every known window goes there (Choose).
func contextWindows(ts []config.Target) []int {
	var ws []int
	unknown := false
	for i := range ts {
		if ts[i].ContextWindow > 0 {
			ws = append(ws, ts[i].ContextWindow)
		} else {
			unknown = true
		}
	}
	slices.Sort(ws)
	ws = slices.Compact(ws)
	if len(ws) == 0 {
		return nil
	}
	out := ws[1:]
	if unknown {
		out = append(out, ws[len(ws)-1]+1)
	}
	return out
}

// familyPools lists the restricted pools a model needs per API family:
//   - poolfam_<family>: the targets whose backend takes the family at all,
//     natively or translated, when only some do;
//   - poolnat_<family>: the targets that speak it natively, when others
//     take it only translated: for requests the translator cannot express
//     (and count_tokens, which has no translation);
//
// each followed by its context-window restrictions over its own targets.
func familyPools(cfg *config.Config, m *config.Model) []contract.Pool {
	var out []contract.Pool
	for _, f := range config.FamilyNames {
		reach, native := count(cfg, m, f)
		var sels []contract.Pool
		if reach > 0 && reach < len(m.Targets) {
			sels = append(sels, contract.Pool{Alias: m.Name, Family: f})
		}
		if native > 0 && native < reach {
			sels = append(sels, contract.Pool{Alias: m.Name, Family: f, Native: true})
		}
		for _, sel := range sels {
			out = append(out, sel)
			for _, w := range contextWindows(newPool(cfg, m, sel).Targets) {
				out = append(out, contract.Pool{Alias: m.Name, Family: f, Native: sel.Native, MinContext: w})
			}
		}
	}
	return out
}

// count is how many of the model's targets take the family at all
// (reach) and natively.
func count(cfg *config.Config, m *config.Model, family string) (reach, native int) {
	for i := range m.Targets {
		b, ok := cfg.Backend(m.Targets[i].Backend)
		if !ok {
			continue
		}
		r, n := takes(b, family)
		if r {
			reach++
		}
		if n {
			native++
		}
	}
	return reach, native
}

// affinityBackends lists the backends of a model with more than one
// target that serve the Responses API and are not drained: one pool each,
// for requests naming a previous_response_id, which only the backend (and
// key) that created it can continue. A model of one target routes them to
// its own pool.
func affinityBackends(cfg *config.Config, m *config.Model) []string {
	if len(m.Targets) < 2 {
		return nil
	}
	var out []string
	for i := range m.Targets {
		t := &m.Targets[i]
		if b, ok := cfg.Backend(t.Backend); ok && b.Serves(config.FamilyResponses) && t.Weight > 0 && !slices.Contains(out, b.Name) {
			out = append(out, b.Name)
		}
	}
	return out
}
