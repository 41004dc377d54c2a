package swarm

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/test/envoysim"
	"github.com/swarmgate/swarmgate/xds/server"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// agentKey is the virtual key every simulated agent presents.
const agentKey = "sk-swarm-agent"

// model is the alias every test asks for.
const model = "chat"

// relaySpec is one mock relay (provider) and its place in the pool.
type relaySpec struct {
	name     string
	keys     int
	priority int
	weight   int
	keyRPM   int // per-key rpm in the gateway config (0: none)
	mock     mockupstream.Behavior
	ttft     time.Duration
	perToken time.Duration
}

// stackSpec describes one assembled gateway.
type stackSpec struct {
	relays   []relaySpec
	replicas int // ext_proc replicas sharing one redis-server
	// routerOn and upstreamOn are the replica indexes each filter's
	// streams go to (round robin when several).
	routerOn, upstreamOn []int
	breaker              string // YAML body of "breaker:"
	numRetries           int
	// admission is the YAML body of "admission:" (empty: the defaults,
	// queue and pace on).
	admission string
	// tenants replace the one default tenant ("swarm", agentKey).
	tenants []tenantSpec
	// accounting adds the ledger, token reservations and budgets
	// (token_limits: reserve, every target priced at price).
	accounting bool
	// models replace the one model (every relay a target of "chat").
	models []modelSpec
}

// modelSpec is one model alias and the relays serving it.
type modelSpec struct {
	name   string
	relays []string
}

// price is every target's price when the stack does accounting: high, so
// a few requests make a budget.
const price = "{input_per_mtok: 1000, output_per_mtok: 2000}"

// tenantSpec is one tenant with one virtual key.
type tenantSpec struct {
	name, key string
	weight    int
	budget    float64 // monthly, hard-capped; 0: none
}

type stack struct {
	redis  *redistest.Server
	cfg    *config.Config
	relays map[string]*mockupstream.Server
	pools  []*keypool.Pools       // one per ext_proc replica
	regs   []*prometheus.Registry // each replica's key-pool metrics
	addrs  []string               // ext_proc replicas' gRPC addresses
	sim    *envoysim.Sim
	eds    *edsFeed
	health *tappedHealth
	http   *http.Client
	queues []*admission.Queue // per replica, when queueing
	waits  *waitLog           // every replica's admission decisions, when queueing
	ledger *ledger.Ledger     // when accounting
}

func relayKeyID(relay string, i int) string  { return fmt.Sprintf("%s-k%d", relay, i+1) }
func relaySecret(relay string, i int) string { return fmt.Sprintf("sk-%s-secret-%d", relay, i+1) }

func (sp stackSpec) yaml(relayAddr map[string]string, redisAddr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis:\n  addrs: [%s]\n", redisAddr)
	b.WriteString("request:\n  message_timeout: 5s\n  timeout: 20s\n")
	fmt.Fprintf(&b, "retry:\n  num_retries: %d\n  backoff_base: 5ms\n  backoff_max: 50ms\n  budget_percent: 100\n", max(sp.numRetries, 0))
	b.WriteString("breaker:\n" + sp.breaker + "\n")
	if sp.admission != "" {
		b.WriteString("admission:\n" + sp.admission + "\n")
	}
	if sp.accounting {
		b.WriteString("accounting:\n  token_limits: reserve\n")
	}
	b.WriteString("backends:\n")
	for _, r := range sp.relays {
		fmt.Fprintf(&b, "  - name: %s\n    base_url: http://%s/v1\n    auth: bearer\n    keys:\n", r.name, relayAddr[r.name])
		for i := range r.keys {
			fmt.Fprintf(&b, "      - {id: %s, secret: \"env:%s\"", relayKeyID(r.name, i), envName(r.name, i))
			if r.keyRPM > 0 {
				fmt.Fprintf(&b, ", rpm: %d", r.keyRPM)
			}
			b.WriteString("}\n")
		}
	}
	models := sp.models
	if len(models) == 0 {
		models = []modelSpec{{name: model}}
		for _, r := range sp.relays {
			models[0].relays = append(models[0].relays, r.name)
		}
	}
	var names []string
	b.WriteString("models:\n")
	for _, m := range models {
		names = append(names, m.name)
		fmt.Fprintf(&b, "  - name: %s\n    targets:\n", m.name)
		for _, r := range sp.relays {
			if !slices.Contains(m.relays, r.name) {
				continue
			}
			fmt.Fprintf(&b, "      - {backend: %s, priority: %d, weight: %d", r.name, r.priority, max(r.weight, 1))
			if sp.accounting {
				b.WriteString(", price: " + price)
			}
			b.WriteString("}\n")
		}
	}
	tenants := sp.tenants
	if len(tenants) == 0 {
		tenants = []tenantSpec{{name: "swarm", key: agentKey}}
	}
	b.WriteString("tenants:\n")
	for _, t := range tenants {
		fmt.Fprintf(&b, "  - name: %s\n    models: [%s]\n", t.name, strings.Join(names, ", "))
		if t.weight > 0 {
			fmt.Fprintf(&b, "    weight: %d\n", t.weight)
		}
		if t.budget > 0 {
			fmt.Fprintf(&b, "    budget: {monthly: %g, hard_cap: true}\n", t.budget)
		}
		fmt.Fprintf(&b, "    keys:\n      - {id: %s-1, hash: %s}\n", t.name, config.HashKey(t.key))
	}
	return b.String()
}

func envName(relay string, i int) string {
	return strings.ToUpper(strings.NewReplacer("-", "_").Replace(relay)) + fmt.Sprintf("_K%d", i+1)
}

// startStack assembles redis, relays, ext_proc replicas, the control plane
// (health from replica 0's key pools, as in `swarmgate serve`), envoysim
// built from the generated xDS, and the EDS subscription feeding it.
func startStack(t *testing.T, sp stackSpec) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{relays: map[string]*mockupstream.Server{}}
	s.redis = redistest.Start(t)
	var addrs map[string]string
	s.relays, addrs = startRelays(t, ctx, sp.relays)
	cfg, err := config.Parse([]byte(sp.yaml(addrs, s.redis.Addr)), "swarm.yaml", config.Options{LookupEnv: relaySecrets(sp.relays)})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	s.waits = &waitLog{}
	if sp.accounting {
		s.ledger = ledger.New(s.redis.Client(), ledger.OptionsFrom(cfg))
		wg.Add(1)
		go func() { defer wg.Done(); s.ledger.Run(ctx) }()
	}
	for i := range max(sp.replicas, 1) {
		reg := prometheus.NewRegistry()
		pools, err := keypool.New(cfg, keypool.Options{Redis: s.redis.Client(), ReplicaID: fmt.Sprintf("r%d", i), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = pools.Run(ctx) }()
		opts := extproc.Options{Config: cfg, Keys: wire.Keys(pools), Usage: wire.Usage()}
		if sp.accounting {
			cfgFn := func() *config.Config { return cfg }
			opts.Ledger = wire.Ledger(s.ledger, cfgFn)
			opts.Reserver = wire.Reserver(reserve.New(s.redis.Client(), cfg, reserve.Options{}), cfgFn)
			opts.Budgets = wire.Budgets(budget.New(s.redis.Client(), cfg, budget.Options{}))
		}
		{
			// Wired as the gateway wires it (it acts while
			// admission.max_wait > 0, the default): one order for every
			// replica, in the shared redis-server, on each replica's own
			// order client.
			orc, err := gateway.AdmissionClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { orc.Close() })
			aopts := gateway.AdmissionOptions(cfg, orc)
			aopts.ReplicaID, aopts.Metrics = fmt.Sprintf("r%d", i), admission.NewMetrics(reg)
			q := admission.New(aopts)
			s.queues = append(s.queues, q)
			opts.Queue = s.waits.wrap(wire.Queue(q))
		}
		ep, err := extproc.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		ep.Register(gs)
		go func() { _ = gs.Serve(lis) }()
		t.Cleanup(gs.Stop)
		s.pools = append(s.pools, pools)
		s.regs = append(s.regs, reg)
		s.addrs = append(s.addrs, lis.Addr().String())
	}

	s.health = tapHealth(ctx, s.pools[0])
	cp := server.New(server.Options{Health: s.health})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	xlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = cp.Run(ctx, xlis) }()

	res, err := translator.Translate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pick := func(idx []int) string {
		if len(idx) == 0 {
			idx = []int{0}
		}
		var as []string
		for _, i := range idx {
			as = append(as, s.addrs[i])
		}
		return roundRobinTarget(as...)
	}
	routerT, upT := pick(sp.routerOn), pick(sp.upstreamOn)
	sim, err := envoysim.FromXDS(res.Listeners[0], res.Routes, res.Clusters, translator.Endpoints(res.IR, translator.EndpointState{}),
		envoysim.XDSOptions{RoleHeader: contract.GRPCRoleHeader, Seed: 7, ExtProcTarget: func(role string) string {
			if role == contract.RoleUpstream {
				return upT
			}
			return routerT
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.sim = sim
	s.eds = startEDSFeed(t, ctx, xlis.Addr().String(), cfg.Envoy.NodeCluster, sim)
	// The first push is the initial state; wait for it so later pushes are
	// changes.
	waitUntil(t, "initial EDS push", 5*time.Second, func() bool { return s.eds.pushes() > 0 })
	s.http = newHTTPClient()
	return s
}

// startRelays starts one mock relay per spec, each holding its keys'
// secrets, and returns them and their addresses by name.
func startRelays(t *testing.T, ctx context.Context, specs []relaySpec) (map[string]*mockupstream.Server, map[string]string) {
	t.Helper()
	relays, addrs := map[string]*mockupstream.Server{}, map[string]string{}
	for _, r := range specs {
		var ks []mockupstream.Key
		for i := range r.keys {
			ks = append(ks, mockupstream.Key{ID: relayKeyID(r.name, i), Value: relaySecret(r.name, i)})
		}
		m := mockupstream.New(mockupstream.Options{Keys: ks, Models: []string{model}, CompletionTokens: 8,
			TTFT: r.ttft, InterTokenDelay: r.perToken, Default: r.mock, Seed: uint64(len(relays) + 1)})
		if _, err := m.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		relays[r.name] = m
		addrs[r.name] = m.Addr().String()
	}
	return relays, addrs
}

// relaySecrets resolves the config's env: references to the relays' keys.
func relaySecrets(specs []relaySpec) func(string) (string, bool) {
	secrets := map[string]string{}
	for _, r := range specs {
		for i := range r.keys {
			secrets[envName(r.name, i)] = relaySecret(r.name, i)
		}
	}
	return func(k string) (string, bool) { v, ok := secrets[k]; return v, ok }
}

func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, DisableCompression: true}}
}

func (s *stack) relay(name string) *mockupstream.Server { return s.relays[name] }

func (s *stack) relayAddr(name string) string { return s.relays[name].Addr().String() }

// client is an openai-go client through the sim, without SDK retries so
// every 429 is seen.
func sdkClient(baseURL, key string, hc *http.Client) openai.Client {
	return openai.NewClient(option.WithBaseURL(baseURL+"/v1/"), option.WithAPIKey(key), option.WithHTTPClient(hc),
		option.WithMaxRetries(0), option.WithRequestTimeout(25*time.Second))
}

// tappedHealth forwards the key pools' health to the control plane and
// records when each change signal fired (the start of the EDS loop).
type tappedHealth struct {
	p   *keypool.Pools
	out chan struct{}
	mu  sync.Mutex
	at  []time.Time
}

func tapHealth(ctx context.Context, p *keypool.Pools) *tappedHealth {
	h := &tappedHealth{p: p, out: make(chan struct{}, 1)}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.Changes():
				h.mu.Lock()
				h.at = append(h.at, time.Now())
				h.mu.Unlock()
				select {
				case h.out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return h
}

func (h *tappedHealth) BackendHealth() map[string]bool { return h.p.BackendHealth() }
func (h *tappedHealth) BackendCapacity() map[string]contract.Capacity {
	return h.p.BackendCapacity()
}
func (h *tappedHealth) Changes() <-chan struct{} { return h.out }

// waitUntil polls cond every millisecond until it holds or within passes.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Now()
}

// keyState is a key's breaker state as one replica sees it.
func keyState(p *keypool.Pools, backend, key string) string {
	for _, k := range p.Snapshot() {
		if k.Backend == backend && k.KeyID == key {
			return k.State
		}
	}
	return ""
}

// waitRecord is the sim's record of a request, found by the id the client
// sent (Envoy replaces it on edge requests); the record is written when the
// stream is destroyed, possibly after the client has its answer (the
// bound is for a loaded machine; the record is there in milliseconds).
func waitRecord(t *testing.T, sim *envoysim.Sim, id string) (envoysim.Record, bool) {
	t.Helper()
	return sim.AwaitRecord(id, 30*time.Second)
}

// waitLog records every admission decision of every replica: the
// request's tenant, how long it waited in the queue (0: admitted at once)
// and when the decision was made.
type waitLog struct {
	mu  sync.Mutex
	all []admissionWait
}

type admissionWait struct {
	tenant   string
	admitted bool
	waited   time.Duration
	at       time.Time // when Admit returned
	arrival  time.Time // when it was called
}

func (l *waitLog) wrap(q extproc.AdmissionQueue) extproc.AdmissionQueue { return loggedQueue{q, l} }

type loggedQueue struct {
	q   extproc.AdmissionQueue
	log *waitLog
}

func (lq loggedQueue) Admit(ctx context.Context, r extproc.QueueRequest, capacity func() (bool, time.Duration, extproc.Rate)) extproc.QueueResult {
	start := time.Now()
	res := lq.q.Admit(ctx, r, capacity)
	at := time.Now()
	lq.log.mu.Lock()
	lq.log.all = append(lq.log.all, admissionWait{tenant: r.Tenant, admitted: res.Admitted, waited: res.Waited, at: at, arrival: start})
	lq.log.mu.Unlock()
	return res
}

// admitted returns the admitted decisions in the order they were made.
func (l *waitLog) admitted() []admissionWait {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []admissionWait
	for _, w := range l.all {
		if w.admitted {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b admissionWait) int { return a.at.Compare(b.at) })
	return out
}

// waitPct is the p-quantile of the admitted requests' queue waits (0 for
// those admitted at once), and how many there were.
func (l *waitLog) waitPct(p float64) (time.Duration, int) {
	ws := l.admitted()
	if len(ws) == 0 {
		return 0, 0
	}
	d := make([]time.Duration, len(ws))
	for i, w := range ws {
		d[i] = w.waited
	}
	slices.Sort(d)
	return d[min(int(math.Ceil(p*float64(len(d))))-1, len(d)-1)], len(d)
}
