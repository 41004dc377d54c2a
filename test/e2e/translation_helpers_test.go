package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// The translation stack: a relay that speaks chat completions only, an
// Anthropic provider, and aliases whose clients speak another family than
// their backend (docs/families.md, "Translation").
func translationYAML(relay, relayB, ant, redisAddr string) string {
	return fmt.Sprintf(`
redis:
  addrs: [%s]
request:
  max_body_bytes: 65536
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_429: 1
accounting:
  token_limits: reserve
backends:
  - name: relay
    base_url: http://%s/openai/v1
    auth: bearer
    families: [chat_completions]
    keys:
      - {id: relay-1, secret: env:R1}
  - name: relay-b
    base_url: http://%s/v1
    auth: bearer
    families: [chat_completions]
    keys:
      - {id: relay-b-1, secret: env:O1}
  - name: ant
    base_url: http://%s/v1
    api_style: anthropic
    auth: x-api-key
    keys:
      - {id: ant-1, secret: env:N1}
models:
  # Anthropic Messages and Responses clients on a chat completions relay.
  - name: claude-cheap
    targets:
      - {backend: relay, model: relay-model, price: %s}
  # Chat completions clients on an Anthropic provider.
  - name: gpt-on-claude
    targets:
      - {backend: ant, model: claude-upstream, price: %s}
  # Both families; a retry may land on a backend of the other.
  - name: either
    targets:
      - {backend: relay, model: relay-model, price: %s}
      - {backend: ant, model: claude-upstream, priority: 1, price: %s}
  # Two chat relays: a Responses request fails over translated.
  - name: two-relays
    targets:
      - {backend: relay, model: relay-model, price: %s}
      - {backend: relay-b, model: relay-model, priority: 1, price: %s}
tenants:
  - name: team
    models: [claude-cheap, gpt-on-claude, either, two-relays]
    keys:
      - {id: team-1, hash: %s}
    limits: {tpm: 1000000}
  - name: limited
    models: [claude-cheap, gpt-on-claude]
    limits: {tpm: 60}
    keys:
      - {id: limited-1, hash: %s}
  - name: broke
    models: [claude-cheap, gpt-on-claude]
    budget: {monthly: 0.00001, hard_cap: true}
    keys:
      - {id: broke-1, hash: %s}
`, redisAddr, relay, relayB, ant, price(priceOAI), price(priceAnt), price(priceOAI), price(priceAnt), price(priceOAI), price(priceOAI),
		config.HashKey(keyTeam), config.HashKey(keyLimited), config.HashKey(keyBroke))
}

type translationGateway struct {
	*familyGateway
	relayB *mockupstream.Server
}

func startTranslation(t *testing.T) *translationGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	g := &familyGateway{gateway: &gateway{}}
	// Both answer tool calls when a request declares tools.
	tools := func(o *mockupstream.Options) { o.ToolCalls = true }
	g.relay = startFamilyMock(t, ctx, config.AuthBearer, map[string]string{"relay-1": "R1"}, tools)
	g.ant = startFamilyMock(t, ctx, config.AuthXAPIKey, map[string]string{"ant-1": "N1"}, tools)
	relayB := startFamilyMock(t, ctx, config.AuthBearer, map[string]string{"relay-b-1": "O1"}, tools)
	cfg, err := config.Parse([]byte(translationYAML(g.relay.Addr().String(), relayB.Addr().String(), g.ant.Addr().String(), rs.Addr)),
		"translation.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := familySecrets[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	g.serve(t, ctx, cfg, rs.Client(), nil)
	return &translationGateway{g, relayB}
}

// servedAll are the 200 records of every mock.
func servedAll(ss ...*mockupstream.Server) []mockupstream.Record {
	var out []mockupstream.Record
	for _, s := range ss {
		out = append(out, served(s)...)
	}
	return out
}
