package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/affinity"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/metricstest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/telemetry"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/test/envoysim"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// Virtual keys; the config stores only their hashes.
const (
	keyTeam    = "sk-team-e2e"
	keyLimited = "sk-limited-e2e"
	keyBroke   = "sk-broke-e2e"
)

var upstreamKeys = map[string]string{
	"A1": "relay-a-secret-1", "A2": "relay-a-secret-2", "B1": "relay-b-secret-1", "C1": "relay-c-secret-1",
}

type gateway struct {
	sim       *envoysim.Sim
	refusals  *admin.RefusalLog
	metrics   *prometheus.Registry   // the router-level server's
	upMetrics []*prometheus.Registry // the two upstream-level servers'
	relayA    *mockupstream.Server
	relayB    *mockupstream.Server
	relayC    *mockupstream.Server
	ledger    *ledger.Ledger
	cfg       *config.Config
	routerEP  *extproc.Server
	upEP      *extproc.Server
	// queue gives the router-level server an admission queue (the
	// shared order in Redis), as swarmgate serve runs by default.
	queue bool
}

func gatewayYAML(relayA, relayB, relayC string, redisAddr string) string {
	return fmt.Sprintf(`
redis:
  addrs: [%s]
request:
  max_body_bytes: 65536
  long_max_tokens: 4096
  long_when_tools: true
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
  - name: relay-a
    base_url: http://%s/v1
    auth: bearer
    keys:
      - {id: relay-a-1, secret: env:A1}
      - {id: relay-a-2, secret: env:A2}
  - name: relay-b
    base_url: http://%s/openai/v1
    auth: x-api-key
    headers: {x-relay-tag: b}
    keys:
      - {id: relay-b-1, secret: env:B1}
  - name: relay-c
    base_url: http://%s/azure/v1
    auth: api-key
    headers: {x-relay-c: c}
    keys:
      - {id: relay-c-1, secret: env:C1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, context_window: 128000, price: {input_per_mtok: 0.15, output_per_mtok: 0.60}}
      - {backend: relay-b, model: openai/gpt-4o-mini, priority: 1, context_window: 128000, price: {input_per_mtok: 0.15, output_per_mtok: 0.60}}
  - name: solo
    targets:
      - {backend: relay-a}
  # Three relays, three base paths, three auth styles, one per priority.
  - name: tri
    targets:
      - {backend: relay-a}
      - {backend: relay-b, priority: 1}
      - {backend: relay-c, priority: 2}
  - name: premium
    targets:
      - {backend: relay-b}
  - name: ctx
    targets:
      - {backend: relay-a, context_window: 1000}
      - {backend: relay-b, context_window: 100000}
  - name: ctx-open
    targets:
      - {backend: relay-a, context_window: 1000}
      - {backend: relay-b}
tenants:
  - name: team
    models: [gpt-4o-mini, solo, tri, ctx, ctx-open]
    keys:
      - {id: team-1, hash: %s}
    limits: {tpm: 1000000}
  - name: limited
    models: [solo]
    limits: {tpm: 60}
    keys:
      - {id: limited-1, hash: %s}
  - name: broke
    models: [gpt-4o-mini]
    budget: {monthly: 0.00001, hard_cap: true}
    keys:
      - {id: broke-1, hash: %s}
`, redisAddr, relayA, relayB, relayC, config.HashKey(keyTeam), config.HashKey(keyLimited), config.HashKey(keyBroke))
}

func startRelay(t *testing.T, ctx context.Context, auth config.AuthStyle, keys ...string) *mockupstream.Server {
	t.Helper()
	var ks []mockupstream.Key
	for _, k := range keys {
		ks = append(ks, mockupstream.Key{ID: strings.ToLower(map[string]string{"A1": "relay-a-1", "A2": "relay-a-2", "B1": "relay-b-1", "C1": "relay-c-1"}[k]), Value: upstreamKeys[k]})
	}
	s := mockupstream.New(mockupstream.Options{Auth: auth, Keys: ks, Models: []string{"gpt-4o-mini", "openai/gpt-4o-mini"},
		CompletionTokens: 7, RecordHeaders: []string{"x-relay-tag", "x-relay-c", "authorization", "x-api-key", "api-key"}})
	if _, err := s.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startExtProc(t *testing.T, ctx context.Context, cfg *config.Config, rdb *redis.Client, led *ledger.Ledger,
	reg *prometheus.Registry, refusals *admin.RefusalLog, queue bool) (*extproc.Server, string) {
	t.Helper()
	pools, err := keypool.New(cfg, keypool.Options{Redis: rdb, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = pools.Run(ctx) }()
	cfgFn := func() *config.Config { return cfg }
	aff := affinity.New(rdb, affinity.Options{Prefix: cfg.Redis.KeyPrefix, ReadTimeout: cfg.Redis.ReadTimeout.D()})
	go func() { _ = aff.Run(ctx) }()
	opts := extproc.Options{Config: cfg, Keys: wire.Keys(pools), Usage: wire.Usage(), Ledger: wire.Ledger(led, cfgFn),
		Reserver: wire.Reserver(reserve.New(rdb, cfg, reserve.Options{}), cfgFn),
		Budgets:  wire.Budgets(budget.New(rdb, cfg, budget.Options{})),
		Refusals: wire.Refusals(refusals), Registerer: reg, Metrics: telemetry.NewMetrics(reg, cfg), Affinity: wire.Affinity(aff)}
	if queue {
		opts.Queue = wire.Queue(admission.New(admission.Options{Order: admission.NewRedisOrder(rdb, cfg.Redis.KeyPrefix), ReplicaID: "router",
			StepTimeout: 5 * time.Second}))
	}
	srv, err := extproc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(extproc.GRPCServerOptions()...)
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return srv, lis.Addr().String()
}

func startGateway(t *testing.T) *gateway { return startGatewayWith(t, gatewayOptions{}) }

// gatewayOptions change the stack startGateway builds.
type gatewayOptions struct {
	// rateLimits charges TPM through Envoy's rate-limit filter
	// (accounting.token_limits: ratelimit) against the real
	// envoyproxy/ratelimit service, which the sim then calls.
	rateLimits bool
}

func startGatewayWith(t *testing.T, o gatewayOptions) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	rdb := rs.Client()
	g := &gateway{}
	g.relayA = startRelay(t, ctx, config.AuthBearer, "A1", "A2")
	g.relayB = startRelay(t, ctx, config.AuthXAPIKey, "B1")
	g.relayC = startRelay(t, ctx, config.AuthAPIKey, "C1")
	cfg, err := config.Parse([]byte(gatewayYAML(g.relayA.Addr().String(), g.relayB.Addr().String(), g.relayC.Addr().String(), rs.Addr)), "e2e.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := upstreamKeys[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	var rls rlspb.RateLimitServiceClient
	if o.rateLimits {
		cfg.Accounting.TokenLimits = translator.TokenLimitsRateLimit
		x := rlstest.StartXDS(t)
		x.Set(t, translator.RateLimitConfig(cfg))
		rcfg := *cfg
		rcfg.Listen.RateLimit, rcfg.Envoy.XDSAddress = "127.0.0.1:0", x.Addr
		svc := rlstest.StartService(t, &rcfg, service.Options{})
		rls = rlspb.NewRateLimitServiceClient(rlstest.Dial(t, svc.Addr))
	}
	g.serve(t, ctx, cfg, rdb, rls)
	return g
}

// serve starts the ledger, the three ext_proc servers and the sim for cfg.
func (g *gateway) serve(t *testing.T, ctx context.Context, cfg *config.Config, rdb *redis.Client, rls rlspb.RateLimitServiceClient) {
	t.Helper()
	g.cfg = cfg
	g.ledger = ledger.New(rdb, ledger.OptionsFrom(cfg))
	go g.ledger.Run(ctx)
	// The router-level filter talks to one ext_proc server, the upstream
	// filter's attempts alternate between two others (separate key pools,
	// shared only through Redis): nothing may pass between streams in
	// process memory.
	var routerAddr, upAddr, upAddr2 string
	g.refusals, g.metrics = admin.NewRefusalLog(0), prometheus.NewRegistry()
	g.routerEP, routerAddr = startExtProc(t, ctx, cfg, rdb, g.ledger, g.metrics, g.refusals, g.queue)
	g.upMetrics = []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	g.upEP, upAddr = startExtProc(t, ctx, cfg, rdb, g.ledger, g.upMetrics[0], g.refusals, false)
	_, upAddr2 = startExtProc(t, ctx, cfg, rdb, g.ledger, g.upMetrics[1], g.refusals, false)

	res, err := translator.Translate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clas := translator.Endpoints(res.IR, translator.EndpointState{})
	sim, err := envoysim.FromXDS(res.Listeners[0], res.Routes, res.Clusters, clas, envoysim.XDSOptions{
		RoleHeader:      contract.GRPCRoleHeader,
		RateLimitClient: rls,
		ExtProcTargets: func(role string) []string {
			if role == contract.RoleUpstream {
				return []string{upAddr, upAddr2}
			}
			return []string{routerAddr}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	g.sim = sim
}

func (g *gateway) client(key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(g.sim.URL() + "/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(0), option.WithRequestTimeout(20 * time.Second)}, opts...)...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes (accounting
// completes on the ext_proc stream after the client has its answer).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func month() string { return ledger.MonthOf(time.Now()) }

func rawPost(t *testing.T, g *gateway, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.sim.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func (g *gateway) chat(key string) *openai.ChatCompletionService {
	c := g.client(key)
	return &c.Chat.Completions
}

func (g *gateway) models(key string) *openai.ModelService {
	c := g.client(key)
	return &c.Models
}

// counter sums a counter family of the router-level server's registry over
// the series whose labels include want.
func (g *gateway) counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	return sumSeries(t, g.metrics, name, want)
}

// upstreamMessages counts the messages of one phase the upstream-level
// servers handled (the sample count of their phase histograms).
func (g *gateway) upstreamMessages(t *testing.T, phase string) float64 {
	t.Helper()
	n := 0.0
	for _, reg := range g.upMetrics {
		n += sumSeries(t, reg, telemetry.MetricPhaseDuration, map[string]string{"filter": "upstream", "phase": phase})
	}
	return n
}

// sumSeries is metricstest.Sum, failing the test on a gather error.
func sumSeries(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	n, err := metricstest.Sum(reg, name, want)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
