package ir

import (
	"slices"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

const familiesYAML = `
backends:
  - {name: chat, base_url: "http://10.0.0.1/v1", families: [chat_completions], max_connections: 10, max_requests: 30, keys: [{id: c1, secret: env:A}]}
  - {name: oai, base_url: "http://10.0.0.2/v1", families: [chat_completions, responses], max_connections: 5, max_requests: 7, keys: [{id: o1, secret: env:B}]}
  - {name: ant, base_url: "http://10.0.0.3/v1", api_style: anthropic, max_connections: 3, max_requests: 4, keys: [{id: a1, secret: env:C}]}
  - {name: emb, base_url: "http://10.0.0.4/v1", families: [embeddings], translate: false, keys: [{id: e1, secret: env:D}]}
models:
  - name: m
    targets:
      - {backend: chat}
      - {backend: oai}
      - {backend: ant}
      - {backend: emb}
`

// TestFamilyPools: per API family, a cluster of the targets that take it
// at all (natively or translated) when only some do, and one of the
// native speakers when others take it only translated; the previous
// response clusters hold one backend, with that backend's thresholds only.
func TestFamilyPools(t *testing.T) {
	cfg, err := config.Parse([]byte(familiesYAML), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	g := Build(cfg)
	pools := map[string][]string{}
	byName := map[string]Pool{}
	for _, p := range g.Pools {
		var bs []string
		for _, tg := range p.Targets {
			bs = append(bs, tg.Backend)
		}
		slices.Sort(bs)
		pools[p.Cluster] = bs
		byName[p.Cluster] = p
	}
	want := map[string][]string{
		"pool_m": {"ant", "chat", "emb", "oai"},
		// chat: chat and oai natively, ant translated; emb neither.
		"poolfam_chat_completions_m": {"ant", "chat", "oai"},
		"poolnat_chat_completions_m": {"chat", "oai"},
		// Messages: ant natively, the chat speakers translated.
		"poolfam_anthropic_messages_m": {"ant", "chat", "oai"},
		"poolnat_anthropic_messages_m": {"ant"},
		// Responses: oai natively, chat translated (ant speaks no chat
		// completions, the only family Responses translates into).
		"poolfam_responses_m": {"chat", "oai"},
		"poolnat_responses_m": {"oai"},
		// embeddings: the OpenAI speakers natively (by their families,
		// chat's default is replaced), emb natively.
		"poolfam_embeddings_m": {"emb"},
		// previous_response_id: the backend that holds the response.
		"poolbk3_oai_m": {"oai"},
	}
	for name, bs := range want {
		if !slices.Equal(pools[name], bs) {
			t.Errorf("%s: %v, want %v", name, pools[name], bs)
		}
	}
	for name := range pools {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected cluster %s %v", name, pools[name])
		}
	}
	bk := byName["poolbk3_oai_m"]
	if bk.MaxConnections != 5 || bk.MaxRequests != 7 {
		t.Errorf("poolbk thresholds %d/%d, want oai's own 5/7", bk.MaxConnections, bk.MaxRequests)
	}
	if nat := byName["poolnat_anthropic_messages_m"]; nat.MaxRequests != 4 || !nat.Native || nat.Family != config.FamilyAnthropicMessages {
		t.Errorf("poolnat_anthropic_messages_m %+v", nat)
	}
}

// TestFamilyContextPools: family clusters are restricted further by
// context window, over their own targets, as the router asks for them
// (extproc TestRouterFamilyClusters uses the same model).
func TestFamilyContextPools(t *testing.T) {
	const y = `
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
	cfg, err := config.Parse([]byte(y), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string][]string{}
	for _, p := range Build(cfg).Pools {
		var bs []string
		for _, tg := range p.Targets {
			bs = append(bs, tg.Backend)
		}
		slices.Sort(bs)
		pools[p.Cluster] = bs
	}
	want := map[string][]string{
		"pool_m":          {"ant", "oai", "relay"},
		"poolctx8000_m":   {"ant", "oai"},
		"poolctx200000_m": {"ant"},
		// chat natively: relay and oai; windows 1000 and 8000.
		"poolnat_chat_completions_m":        {"oai", "relay"},
		"poolnatctx8000_chat_completions_m": {"oai"},
		// Messages natively: ant only, one window.
		"poolnat_anthropic_messages_m": {"ant"},
		// Responses: the chat speakers (translated); windows 1000, 8000.
		"poolfam_responses_m":        {"oai", "relay"},
		"poolfamctx8000_responses_m": {"oai"},
	}
	for name, bs := range want {
		if !slices.Equal(pools[name], bs) {
			t.Errorf("%s: %v, want %v", name, pools[name], bs)
		}
	}
	if len(pools) != len(want) {
		t.Errorf("clusters %v", pools)
	}
}
