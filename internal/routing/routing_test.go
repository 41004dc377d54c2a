package routing

import (
	"errors"
	"slices"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

// twinYAML is the model both sides used to be tested on separately
// (xds/ir TestFamilyContextPools, extproc TestRouterFamilyClusters): a
// chat relay with a small window, a chat provider with a larger one and
// an Anthropic provider.
const twinYAML = `
backends:
  - {name: relay, base_url: "http://127.0.0.1:9/v1", families: [chat_completions], keys: [{id: r1, secret: env:R}]}
  - {name: oai, base_url: "http://127.0.0.1:9/v1", families: [chat_completions], keys: [{id: o1, secret: env:O}]}
  - {name: ant, base_url: "http://127.0.0.1:9/v1", api_style: anthropic, auth: x-api-key, keys: [{id: a1, secret: env:A}]}
models:
  - name: m
    targets:
      - {backend: relay, context_window: 1000}
      - {backend: oai, context_window: 8000}
      - {backend: ant, context_window: 200000}
`

// familiesYAML: backends taking different families, natively or not at
// all (translate: false), and one serving the Responses API.
const familiesYAML = `
backends:
  - {name: chat, base_url: "http://10.0.0.1/v1", families: [chat_completions], keys: [{id: c1, secret: env:A}]}
  - {name: oai, base_url: "http://10.0.0.2/v1", families: [chat_completions, responses], keys: [{id: o1, secret: env:B}]}
  - {name: ant, base_url: "http://10.0.0.3/v1", api_style: anthropic, keys: [{id: a1, secret: env:C}]}
  - {name: emb, base_url: "http://10.0.0.4/v1", families: [embeddings], translate: false, keys: [{id: e1, secret: env:D}]}
models:
  - name: m
    targets:
      - {backend: chat}
      - {backend: oai}
      - {backend: ant}
      - {backend: emb}
`

func parse(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(y), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// planned maps each cluster of the plan to its targets' backends.
func planned(cfg *config.Config) map[string][]string {
	out := map[string][]string{}
	for _, p := range Plan(cfg) {
		bs := []string{}
		for _, t := range p.Targets {
			bs = append(bs, t.Backend)
		}
		out[p.Cluster()] = bs
	}
	return out
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       map[string][]string // backends in config order
	}{
		{"families", familiesYAML, map[string][]string{
			"pool_m": {"chat", "oai", "ant", "emb"},
			// chat: chat and oai natively, ant translated; emb neither.
			"poolfam_chat_completions_m": {"chat", "oai", "ant"},
			"poolnat_chat_completions_m": {"chat", "oai"},
			// Messages: ant natively, the chat speakers translated.
			"poolfam_anthropic_messages_m": {"chat", "oai", "ant"},
			"poolnat_anthropic_messages_m": {"ant"},
			// Responses: oai natively, chat translated (ant speaks no chat
			// completions, the only family Responses translates into).
			"poolfam_responses_m":  {"chat", "oai"},
			"poolnat_responses_m":  {"oai"},
			"poolfam_embeddings_m": {"emb"},
			// previous_response_id: the backend that holds the response.
			"poolbk3_oai_m": {"oai"},
		}},
		{"family pools by context window", twinYAML, map[string][]string{
			"pool_m":                            {"relay", "oai", "ant"},
			"poolctx8000_m":                     {"oai", "ant"},
			"poolctx200000_m":                   {"ant"},
			"poolnat_chat_completions_m":        {"relay", "oai"},
			"poolnatctx8000_chat_completions_m": {"oai"},
			"poolnat_anthropic_messages_m":      {"ant"},
			"poolfam_responses_m":               {"relay", "oai"},
			"poolfamctx8000_responses_m":        {"oai"},
		}},
		{"unknown windows: a pool above every known one", `
backends:
  - {name: a, base_url: "http://10.0.0.1/v1", keys: [{id: a1, secret: env:A}]}
  - {name: b, base_url: "http://10.0.0.2/v1", keys: [{id: b1, secret: env:B}]}
  - {name: c, base_url: "http://10.0.0.3/v1", keys: [{id: c1, secret: env:C}]}
models:
  - name: m
    targets:
      - {backend: a, context_window: 8000}
      - {backend: b, context_window: 128000, weight: 0, priority: 1}
      - {backend: c, priority: 1}
`, map[string][]string{
			// The drained target stays in the plan: draining is the
			// cluster's business (no locality), not routing's.
			"pool_m":          {"a", "b", "c"},
			"poolctx128000_m": {"b", "c"},
			"poolctx128001_m": {"c"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planned(parse(t, tt.yaml))
			for name, bs := range tt.want {
				if !slices.Equal(got[name], bs) {
					t.Errorf("%s: %v, want %v", name, got[name], bs)
				}
			}
			for name := range got {
				if _, ok := tt.want[name]; !ok {
					t.Errorf("unexpected cluster %s %v", name, got[name])
				}
			}
		})
	}
}

var errNoTopK = errors.New("top_k has no equivalent")

// TestChoose: the twin model's requests, as extproc TestRouterFamilyClusters
// sends them, reduced to their routing facts.
func TestChoose(t *testing.T) {
	cfg := parse(t, twinYAML)
	m, _ := cfg.Model("m")
	untranslatable := func([]*config.Backend, bool) error { return errNoTopK }
	const (
		chat = config.FamilyChatCompletions
		msgs = config.FamilyAnthropicMessages
		resp = config.FamilyResponses
	)
	tests := []struct {
		name     string
		req      Request
		refuse   bool // the body cannot be translated
		cluster  string
		backends []string
		reason   Reason
	}{
		{"chat, every target", Request{Family: chat, Need: 100}, false, "pool_m", []string{"relay", "oai", "ant"}, 0},
		{"chat, too long for the relay", Request{Family: chat, Need: 2100}, false, "poolctx8000_m", []string{"oai", "ant"}, 0},
		{"chat, untranslatable: native only", Request{Family: chat, Need: 100}, true,
			"poolnat_chat_completions_m", []string{"relay", "oai"}, 0},
		{"chat, untranslatable and too long for the relay", Request{Family: chat, Need: 2100}, true,
			"poolnatctx8000_chat_completions_m", []string{"oai"}, 0},
		{"messages, every target", Request{Family: msgs, Need: 100}, false, "pool_m", []string{"relay", "oai", "ant"}, 0},
		{"messages, untranslatable: native only", Request{Family: msgs, Need: 100}, true,
			"poolnat_anthropic_messages_m", []string{"ant"}, 0},
		{"count_tokens: native only", Request{Family: msgs, Untranslated: true}, false, "poolnat_anthropic_messages_m", []string{"ant"}, 0},
		{"responses: the chat speakers", Request{Family: resp, Need: 100}, false, "poolfam_responses_m", []string{"relay", "oai"}, 0},
		{"responses, too long for the relay", Request{Family: resp, Need: 2100}, false, "poolfamctx8000_responses_m", []string{"oai"}, 0},
		{"responses, untranslatable: no native speaker", Request{Family: resp, Need: 100}, true, "", nil, Untranslatable},
		{"embeddings: nobody", Request{Family: config.FamilyEmbeddings}, false, "", nil, NoBackend},
		{"longer than every window", Request{Family: chat, Need: 200001}, false, "", nil, ContextTooLong},
		{"chat, too long for every chat speaker: the translator", Request{Family: chat, Need: 9000}, false, "poolctx200000_m", []string{"ant"}, 0},
		{"chat natively, too long for every chat speaker", Request{Family: chat, Need: 9000}, true, "", nil, ContextTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var can Translatable
			if tt.refuse {
				can = untranslatable
			}
			ch, ref := Choose(cfg, m, tt.req, can, nil)
			switch {
			case tt.reason != 0 && (ref == nil || ref.Reason != tt.reason):
				t.Fatalf("got %+v, %v; want refusal %v", ch, ref, tt.reason)
			case tt.reason == Untranslatable && !errors.Is(ref, errNoTopK):
				t.Errorf("refusal %v does not carry its cause", ref)
			case tt.reason == ContextTooLong && ref.MaxWindow != 200000:
				t.Errorf("MaxWindow %d, want 200000", ref.MaxWindow)
			case tt.reason == 0 && ref != nil:
				t.Fatalf("refused: %v", ref)
			case tt.reason == 0 && (ch.Cluster() != tt.cluster || !slices.Equal(ch.Backends, tt.backends)):
				t.Errorf("%s %v, want %s %v", ch.Cluster(), ch.Backends, tt.cluster, tt.backends)
			}
		})
	}
}

// TestChooseDrained: a drained target (weight 0) is in the plan's
// clusters but serves nothing: a request only it could hold is refused as
// too long, with the largest window that serves, instead of going to a
// cluster with no host (Envoy's 503); one the others hold is routed as if
// it were not there.
func TestChooseDrained(t *testing.T) {
	cfg := parse(t, `
backends:
  - {name: small, base_url: "http://10.0.0.1/v1", keys: [{id: s1, secret: env:A}]}
  - {name: mid, base_url: "http://10.0.0.2/v1", keys: [{id: m1, secret: env:B}]}
  - {name: wide, base_url: "http://10.0.0.3/v1", keys: [{id: w1, secret: env:C}]}
models:
  - name: m
    targets:
      - {backend: small, context_window: 8000}
      - {backend: mid, context_window: 32000}
      - {backend: wide, context_window: 128000, weight: 0}
`)
	m, _ := cfg.Model("m")
	plan := planned(cfg)
	for _, tt := range []struct {
		need     int
		cluster  string
		backends []string
		maxWin   int // a ContextTooLong refusal's MaxWindow
	}{
		{100, "pool_m", []string{"small", "mid"}, 0},
		{9000, "poolctx32000_m", []string{"mid"}, 0},
		{40000, "", nil, 32000},
	} {
		ch, ref := Choose(cfg, m, Request{Family: config.FamilyChatCompletions, Need: tt.need}, nil, nil)
		if tt.cluster == "" {
			if ref == nil || ref.Reason != ContextTooLong || ref.MaxWindow != tt.maxWin {
				t.Errorf("need %d: %s %v, %v; want too long, largest window %d", tt.need, ch.Cluster(), ch.Backends, ref, tt.maxWin)
			}
			continue
		}
		if ref != nil || ch.Cluster() != tt.cluster || !slices.Equal(ch.Backends, tt.backends) {
			t.Errorf("need %d: %s %v (%v), want %s %v", tt.need, ch.Cluster(), ch.Backends, ref, tt.cluster, tt.backends)
		}
		if _, ok := plan[ch.Cluster()]; !ok {
			t.Errorf("need %d: %s is not a planned cluster", tt.need, ch.Cluster())
		}
	}
	// Only the drained target could take it (a response pinned to it):
	// a pause, not a request the model cannot serve.
	if ch, ref := Choose(cfg, m, Request{Family: config.FamilyChatCompletions, Need: 100, Pinned: "wide"}, nil, nil); ref == nil || ref.Reason != Drained {
		t.Errorf("pinned to the drained target: %s %v, %v; want Drained", ch.Cluster(), ch.Backends, ref)
	}
}

// TestChoosePinned: a continued response goes to its backend's pool,
// whatever the windows, on a model of more than one target; on a model
// of one target, to the model's own pool.
func TestChoosePinned(t *testing.T) {
	cfg := parse(t, familiesYAML)
	m, _ := cfg.Model("m")
	ch, ref := Choose(cfg, m, Request{Family: config.FamilyResponses, Need: 100, Pinned: "oai"}, nil, nil)
	if ref != nil || ch.Cluster() != "poolbk3_oai_m" || !slices.Equal(ch.Backends, []string{"oai"}) {
		t.Errorf("got %s %v %v", ch.Cluster(), ch.Backends, ref)
	}
	one := parse(t, `
backends:
  - {name: oai, base_url: "http://10.0.0.2/v1", families: [responses], keys: [{id: o1, secret: env:B}]}
models:
  - name: solo
    targets: [{backend: oai, context_window: 1000}]
`)
	solo, _ := one.Model("solo")
	if ch, ref := Choose(one, solo, Request{Family: config.FamilyResponses, Need: 100, Pinned: "oai"}, nil, nil); ref != nil || ch.Cluster() != "pool_solo" {
		t.Errorf("got %s %v", ch.Cluster(), ref)
	}
	if _, ref := Choose(one, solo, Request{Family: config.FamilyResponses, Need: 1001, Pinned: "oai"}, nil, nil); ref == nil || ref.Reason != ContextTooLong {
		t.Errorf("a pinned request longer than its backend's window: %v, want too long", ref)
	}
}
