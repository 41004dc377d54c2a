package translate

import (
	"testing"

	"github.com/swarmgate/swarmgate/config"
)

// TestEveryRouteHasATranslator: routing (config.Backend.Route, the xDS
// family clusters) and the data path agree on which pairs exist.
func TestEveryRouteHasATranslator(t *testing.T) {
	n := 0
	for _, from := range config.FamilyNames {
		for _, to := range config.TranslationTargets(from) {
			n++
			tr := Lookup(from, to)
			if tr == nil {
				t.Errorf("config routes %s to %s, but no translator is registered", from, to)
				continue
			}
			if tr.Request == nil || tr.NewResponse == nil || tr.Path == "" {
				t.Errorf("%s → %s: incomplete translator %+v", from, to, tr)
			}
		}
	}
	if n != len(pairs) {
		t.Errorf("%d translators registered, config routes %d pairs", len(pairs), n)
	}
}
