package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// The families stack: two OpenAI-style relays that serve chat completions
// and the Responses API, two Anthropic-style providers, translation off
// (passthrough only; translation_test.go has its own stack). Every secret is
// distinct, so an attempt's credential names its backend and key.
var familySecrets = map[string]string{
	"O1": "oai-secret-1", "O2": "oai-secret-2", "R1": "oai-relay-secret-1", "N1": "ant-secret-1", "N2": "ant-secret-2", "M1": "ant-b-secret-1",
}

// Prices with every part distinct, so a ledger that billed a cache read
// or write at another price shows in the cost.
var (
	priceOAI = config.Price{InputPerMTok: 1.25, OutputPerMTok: 10, CachedInputPerMTok: 0.125, ReasoningPerMTok: 12}
	priceAnt = config.Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3, CacheWriteInputPerMTok: 3.75}
)

// price is a target's price in config YAML, every part written.
func price(p config.Price) string {
	return fmt.Sprintf("{input_per_mtok: %g, output_per_mtok: %g, cached_input_per_mtok: %g, reasoning_per_mtok: %g, cache_write_input_per_mtok: %g}",
		p.InputPerMTok, p.OutputPerMTok, p.CachedInputPerMTok, p.ReasoningPerMTok, p.CacheWriteInputPerMTok)
}

func familiesYAML(oai, relay, ant, antB, redisAddr string) string {
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
  - name: oai
    base_url: http://%s/v1
    auth: bearer
    families: [chat_completions, responses]
    translate: false
    keys:
      - {id: oai-1, secret: env:O1}
      - {id: oai-2, secret: env:O2}
  - name: oai-relay
    base_url: http://%s/openai/v1
    auth: bearer
    families: [chat_completions, responses]
    translate: false
    keys:
      - {id: oai-relay-1, secret: env:R1}
  - name: ant
    base_url: http://%s/v1
    api_style: anthropic
    auth: x-api-key
    translate: false
    keys:
      - {id: ant-1, secret: env:N1}
      - {id: ant-2, secret: env:N2}
  - name: ant-b
    base_url: http://%s/anthropic/v1
    api_style: anthropic
    auth: x-api-key
    translate: false
    keys:
      - {id: ant-b-1, secret: env:M1}
models:
  # One alias, both families: each request goes to the backends of its own.
  - name: mixed
    targets:
      - {backend: oai, price: %s}
      - {backend: ant, price: %s}
  - name: gpt-resp
    targets:
      - {backend: oai, price: %s}
      - {backend: oai-relay, priority: 1, price: %s}
  - name: claude
    targets:
      - {backend: ant, price: %s}
      - {backend: ant-b, priority: 1, price: %s}
tenants:
  - name: team
    models: [mixed, gpt-resp, claude]
    keys:
      - {id: team-1, hash: %s}
    limits: {tpm: 1000000}
  - name: limited
    models: [mixed, claude]
    limits: {tpm: 60}
    keys:
      - {id: limited-1, hash: %s}
  - name: broke
    models: [mixed, claude]
    budget: {monthly: 0.00001, hard_cap: true}
    keys:
      - {id: broke-1, hash: %s}
`, redisAddr, oai, relay, ant, antB, price(priceOAI), price(priceAnt), price(priceOAI), price(priceOAI), price(priceAnt), price(priceAnt),
		config.HashKey(keyTeam), config.HashKey(keyLimited), config.HashKey(keyBroke))
}

type familyGateway struct {
	*gateway
	oai, relay, ant, antB *mockupstream.Server
}

func startFamilyMock(t *testing.T, ctx context.Context, auth config.AuthStyle, keys map[string]string, tweak ...func(*mockupstream.Options)) *mockupstream.Server {
	t.Helper()
	var ks []mockupstream.Key
	for id, env := range keys {
		ks = append(ks, mockupstream.Key{ID: id, Value: familySecrets[env]})
	}
	o := mockupstream.Options{Auth: auth, Keys: ks, CompletionTokens: 7, CachedTokens: 2, ReasoningTokens: 3, CacheWriteTokens: 3,
		RecordHeaders: []string{"authorization", "x-api-key", "anthropic-version", "anthropic-beta"}}
	for _, f := range tweak {
		f(&o)
	}
	s := mockupstream.New(o)
	if _, err := s.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startFamilies(t *testing.T) *familyGateway { return startFamiliesWith(t, false) }

// startFamiliesWith: queue gives the router-level server an admission
// queue.
func startFamiliesWith(t *testing.T, queue bool) *familyGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	g := &familyGateway{gateway: &gateway{queue: queue}}
	g.oai = startFamilyMock(t, ctx, config.AuthBearer, map[string]string{"oai-1": "O1", "oai-2": "O2"})
	g.relay = startFamilyMock(t, ctx, config.AuthBearer, map[string]string{"oai-relay-1": "R1"})
	g.ant = startFamilyMock(t, ctx, config.AuthXAPIKey, map[string]string{"ant-1": "N1", "ant-2": "N2"})
	g.antB = startFamilyMock(t, ctx, config.AuthXAPIKey, map[string]string{"ant-b-1": "M1"})
	cfg, err := config.Parse([]byte(familiesYAML(g.oai.Addr().String(), g.relay.Addr().String(), g.ant.Addr().String(), g.antB.Addr().String(), rs.Addr)),
		"families.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := familySecrets[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	g.serve(t, ctx, cfg, rs.Client(), nil)
	return g
}

// anthropic is an Anthropic SDK client of the gateway; the virtual key as
// x-api-key, as Claude Code sends it.
func (g *familyGateway) anthropic(key string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(g.sim.URL()), aoption.WithHeader("x-api-key", key),
		aoption.WithMaxRetries(0), aoption.WithRequestTimeout(20 * time.Second)}, opts...)...)
}

// billed is what the ledger must hold for the mock's records: their usage
// priced at p, exactly.
func billed(p config.Price, recs ...mockupstream.Record) (u pricing.Usage, cost pricing.Money) {
	r := pricing.RateOf(p)
	for _, rec := range recs {
		one := pricing.Usage{PromptTokens: int64(rec.PromptTokens), CompletionTokens: int64(rec.CompletionTokens),
			CachedTokens: int64(rec.CachedTokens), ReasoningTokens: int64(rec.ReasoningTokens), CacheWriteTokens: int64(rec.CacheWriteTokens)}
		u.PromptTokens += one.PromptTokens
		u.CompletionTokens += one.CompletionTokens
		u.CachedTokens += one.CachedTokens
		u.ReasoningTokens += one.ReasoningTokens
		u.CacheWriteTokens += one.CacheWriteTokens
		cost += r.Cost(one)
	}
	return u, cost
}

// served are the records a mock answered 200.
func served(s *mockupstream.Server) []mockupstream.Record {
	var out []mockupstream.Record
	for _, r := range s.Requests() {
		if r.Status == 200 {
			out = append(out, r)
		}
	}
	return out
}
