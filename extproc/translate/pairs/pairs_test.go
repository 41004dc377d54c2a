package pairs

import (
	"encoding/json"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
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
	if n != len(All()) {
		t.Errorf("%d translators registered, config routes %d pairs", len(All()), n)
	}
}

// TestOnePerPair: no two translators claim the same pair (Lookup would
// hide the second).
func TestOnePerPair(t *testing.T) {
	seen := map[[2]string]bool{}
	for _, tr := range All() {
		k := [2]string{tr.From, tr.To}
		if seen[k] {
			t.Errorf("two translators for %s → %s", tr.From, tr.To)
		}
		seen[k] = true
	}
}

// TestChatMaxTokensField: translators into chat completions put the output
// cap in the field the backend asks for (reasoning models refuse
// max_tokens).
func TestChatMaxTokensField(t *testing.T) {
	tests := []struct {
		from, body string
	}{
		{config.FamilyAnthropicMessages, `{"model":"m","max_tokens":77,"messages":[{"role":"user","content":"hi"}]}`},
		{config.FamilyResponses, `{"model":"m","max_output_tokens":77,"input":"hi"}`},
	}
	for _, tt := range tests {
		for _, field := range []string{"", "max_tokens", "max_completion_tokens"} {
			out, err := Lookup(tt.from, config.FamilyChatCompletions).Request([]byte(tt.body), translate.RequestOptions{Model: "up", MaxTokensField: field})
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatal(err)
			}
			want, other := "max_tokens", "max_completion_tokens"
			if field == "max_completion_tokens" {
				want, other = other, want
			}
			if v[want] != float64(77) || v[other] != nil {
				t.Errorf("%s with %q: %s", tt.from, field, out)
			}
		}
	}
}
