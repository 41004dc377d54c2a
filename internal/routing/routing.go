// Package routing is the one place the routing decision lives: which
// clusters (pools) each model has, and which of them a request goes to.
// The control plane (xds/ir) builds its Envoy clusters from Plan; the
// data path (extproc) names one of them for each request with Choose.
// Both read the same rules below, so a request is never sent to a
// cluster the control plane did not generate, and a cluster holds
// exactly the targets that can serve the requests sent to it (retries
// stay inside the cluster).
//
// A model's targets are restricted in three ways (docs/extproc.md,
// decisions):
//   - by API family: only backends that take the request's family,
//     natively or translated (config.Backend.Route); a request the
//     translator cannot express, or one of a family that has no
//     translation (count_tokens), goes to the native speakers only;
//   - by context window: only targets whose window holds the prompt
//     estimate plus the output reservation (an unknown window holds
//     anything);
//   - by backend: a Responses request continuing a previous response goes
//     to the backend that holds it.
//
// The package is pure: config in, names and target lists out; translating
// a body and everything Envoy-specific stay with the callers.
package routing

import (
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// admits reports whether a target is in the selection, context windows
// aside. A target whose backend is unknown (a config that failed
// validation) is in none.
func admits(cfg *config.Config, sel contract.Pool, t *config.Target) bool {
	if sel.Backend != "" && t.Backend != sel.Backend {
		return false
	}
	if sel.Family == "" {
		return true
	}
	b, ok := cfg.Backend(t.Backend)
	if !ok {
		return false
	}
	reach, native := takes(b, sel.Family)
	return reach && (!sel.Native || native)
}

// takes reports whether the backend takes a request of the family at all
// (natively or translated) and whether natively.
func takes(b *config.Backend, family string) (reach, native bool) {
	_, reach = b.Route(family)
	return reach, reach && b.Serves(family)
}

// fits reports whether a target's context window holds need tokens: an
// unknown window (0) holds anything.
func fits(t *config.Target, need int) bool {
	return t.ContextWindow == 0 || t.ContextWindow >= need
}

// maxWindow is the largest known context window of the targets that are
// not drained (the largest a request can be served with).
func maxWindow(ts []config.Target) int {
	w := 0
	for i := range ts {
		if ts[i].Weight > 0 {
			w = max(w, ts[i].ContextWindow)
		}
	}
	return w
}
