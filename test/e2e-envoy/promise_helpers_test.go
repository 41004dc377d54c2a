package e2eenvoy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/gatewaytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// The promise tests run the whole path on a real Envoy: each builds a
// pstack from a relay list and the backends/models/tenants part of a config,
// and drives it with the official SDKs.

// relaySecrets are the upstream credentials of the promise tests, by env:
// reference name (the config holds only the references).
var relaySecrets = map[string]string{
	"P_A1": "pa-secret-1", "P_A2": "pa-secret-2", "P_B1": "pb-secret-1", "P_B2": "pb-secret-2",
	"P_C1": "pc-secret-1", "P_C2": "pc-secret-2", "P_D1": "pd-secret-1",
	"P_FLEET": "fleet-secret-for-e2e-tests-0123",
}

func lookupSecret(k string) (string, bool) {
	if k == "SG_ADMIN_TOKEN" {
		return adminToken, true
	}
	if v, ok := relaySecrets[k]; ok {
		return v, true
	}
	v, ok := upstreamKeys[k]
	return v, ok
}

// relaySpec is one relay a promise test runs: a mockupstream server that
// accepts the listed keys (id → env name in relaySecrets).
type relaySpec struct {
	name string
	auth config.AuthStyle
	keys map[string]string
	opts func(*mockupstream.Options) // optional changes to the mock's options
}

// credentialHeaders are the headers any provider reads a key from.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key"}

// seen is what a relay's own front saw of one request, before the mock:
// which credential headers it carried (mockupstream never records them).
type seen struct {
	Path  string
	Creds []string // canonical names of the credential headers present
}

// relay is a mockupstream relay behind the test's own HTTP server, which
// records the credential headers of every request and can make the whole
// host answer 5xx (a sick relay, whatever the key).
type relay struct {
	*mockupstream.Server
	name string
	auth config.AuthStyle
	addr string
	mu   sync.Mutex
	reqs []seen
	// hostStatus, when not 0, is answered to every request before the mock
	// sees it.
	hostStatus int
}

func (r *relay) ServeHTTP(w http.ResponseWriter, q *http.Request) {
	s := seen{Path: q.URL.Path}
	for _, h := range credentialHeaders {
		if q.Header.Get(h) != "" {
			s.Creds = append(s.Creds, h)
		}
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	status := r.hostStatus
	r.mu.Unlock()
	if status != 0 {
		_, _ = io.Copy(io.Discard, q.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"relay host failing","type":"server_error","code":null}}`)
		return
	}
	r.Server.ServeHTTP(w, q)
}

func (r *relay) setHostStatus(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hostStatus = code
}

// seenRequests returns a copy of what the front saw.
func (r *relay) seenRequests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// ownCredential is the one header this relay's auth style reads.
func (r *relay) ownCredential() string {
	switch r.auth {
	case config.AuthXAPIKey:
		return "X-Api-Key"
	case config.AuthAPIKey:
		return "Api-Key"
	}
	return "Authorization"
}

func startPromiseRelay(t *testing.T, spec relaySpec) *relay {
	t.Helper()
	var keys []mockupstream.Key
	for id, env := range spec.keys {
		keys = append(keys, mockupstream.Key{ID: id, Value: relaySecrets[env]})
	}
	opts := mockupstream.Options{Auth: spec.auth, Keys: keys, CompletionTokens: 7,
		Models: []string{"gpt-4o-mini", "claude-haiku", "openai/gpt-4o-mini"}}
	if spec.opts != nil {
		spec.opts(&opts)
	}
	r := &relay{Server: mockupstream.New(opts), name: spec.name, auth: spec.auth}
	lis := listen(t)
	r.addr = lis.Addr().String()
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// pstackOptions shape a promise stack.
type pstackOptions struct {
	relays []relaySpec
	// body is the config below listen/envoy/redis: backends, models,
	// tenants and any other section. {relay-x} is replaced by that relay's
	// host:port.
	body string
	// splitControlPlane runs the control plane as its own gateway, so it
	// can be stopped and started while ext_proc and the rate-limit service
	// keep serving.
	splitControlPlane bool
	// noEnvoy leaves starting Envoy to the test.
	noEnvoy bool
	// replicaOf makes the stack another replica (gateway and Envoy) of
	// that stack's deployment: the same Redis and relays, its own ports.
	replicaOf *pstack
}

// pstack is a whole gateway behind a real Envoy, on a watched config file.
type pstack struct {
	*stack
	t       *testing.T
	opts    pstackOptions
	release envoytest.Release
	ports   Ports
	relays  map[string]*relay
	cfgPath string
	redis   string
	cp, dp  *gatewaytest.Gateway // dp is the only gateway unless splitControlPlane
	envoy   *envoyproc.Process   // Stop and a new Start restart it
}

func startPStack(t *testing.T, r envoytest.Release, o pstackOptions) *pstack {
	t.Helper()
	s := &pstack{stack: &stack{}, t: t, opts: o, release: r, relays: map[string]*relay{}}
	if o.replicaOf != nil {
		// Another replica of the same deployment: its Redis and providers.
		s.redis, s.relays = o.replicaOf.redis, o.replicaOf.relays
	} else {
		s.redis = redistest.Start(t).Addr
		for _, spec := range o.relays {
			s.relays[spec.name] = startPromiseRelay(t, spec)
		}
	}
	addr := func() string { a, _ := freeAddr(t); return a }
	_, envoyPort := freeAddr(t)
	s.ports = Ports{XDS: addr(), ExtProc: addr(), RateLimit: addr(), Admin: addr(), EnvoyPort: envoyPort, Redis: s.redis}
	s.cfgPath = filepath.Join(t.TempDir(), "gateway.yaml")
	s.writeConfig(o.body)
	cfg, err := config.Load(s.cfgPath, config.Options{LookupEnv: lookupSecret})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	s.adminURL = "http://" + s.ports.Admin
	s.envoyURL = fmt.Sprintf("http://127.0.0.1:%d", envoyPort)
	envoyAdmin, _ := freeAddr(t)
	s.envoyAdmin = "http://" + envoyAdmin
	s.bootstrapPath = gatewaytest.WriteBootstrap(t, cfg, "e2e-promise-1", envoyAdmin)

	if o.splitControlPlane {
		s.cp = s.runGateway(gateway.Roles{ControlPlane: true}, "e2e-cp")
		s.dp = s.runGateway(gateway.Roles{ExtProc: true, RateLimit: true, Admin: true}, "e2e-dp")
	} else {
		s.dp = s.runGateway(gateway.All, "e2e-promise")
	}
	t.Cleanup(func() {
		for _, g := range []*gatewaytest.Gateway{s.cp, s.dp} {
			if g != nil {
				g.Stop(t)
			}
		}
	})
	if !o.noEnvoy {
		s.envoy = envoyproc.Start(t, r.Path, s.bootstrapPath)
		s.waitRouted(t)
	}
	return s
}

// writeConfig writes the config file (atomically: the watch may read it at
// any time).
func (s *pstack) writeConfig(body string) {
	s.t.Helper()
	p := s.ports
	head := fmt.Sprintf(`listen:
  xds: %s
  extproc: %s
  ratelimit: %s
  admin: %s
envoy:
  listener_address: 127.0.0.1
  listener_port: %d
redis:
  addrs: [%s]
`, p.XDS, p.ExtProc, p.RateLimit, p.Admin, p.EnvoyPort, p.Redis)
	var pairs []string
	for name, r := range s.relays {
		pairs = append(pairs, "{"+name+"}", r.addr)
	}
	pairs = append(pairs, "{keyTeam}", config.HashKey(keyTeam), "{keyLimited}", config.HashKey(keyLimited))
	data := head + strings.NewReplacer(pairs...).Replace(body)
	tmp := s.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.cfgPath); err != nil {
		s.t.Fatal(err)
	}
}

// runGateway starts one in-process gateway with the roles on the watched
// config file and waits until it serves.
func (s *pstack) runGateway(roles gateway.Roles, node string) *gatewaytest.Gateway {
	t := s.t
	t.Helper()
	g := gatewaytest.Start(t, gateway.Options{
		Roles: roles, ConfigPath: s.cfgPath, Load: config.Options{LookupEnv: lookupSecret}, NodeID: node, Version: "e2e",
		Logger: gatewaytest.Logger(t, slog.LevelWarn),
	})
	// The listeners bind in Run; Ready waits only for the rate-limit
	// service. Wait for the gRPC ports the roles serve.
	var addrs []string
	if roles.ControlPlane {
		addrs = append(addrs, s.ports.XDS)
	}
	if roles.ExtProc {
		addrs = append(addrs, s.ports.ExtProc)
	}
	for _, a := range addrs {
		waitDial(t, a)
	}
	return g
}

func waitDial(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// envoyStat reads one counter or gauge from Envoy's admin /stats (0 when
// Envoy has not created it yet).
func (s *pstack) envoyStat(ctx context.Context, name string) (int64, error) {
	status, body, err := get(ctx, s.envoyAdmin+"/stats?filter=^"+regexp.QuoteMeta(name)+"$", "")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("/stats: %d %s", status, body)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// keyStates reads swarmgate's admin /keys.
func (s *pstack) keyStates(ctx context.Context) (map[string]keyState, error) {
	status, body, err := get(ctx, s.adminURL+"/keys", "")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("/keys: %d %s", status, body)
	}
	var out struct {
		Pools []struct {
			Keys []keyState `json:"keys"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		return nil, fmt.Errorf("/keys: %w: %s", err, body)
	}
	m := map[string]keyState{}
	for _, p := range out.Pools {
		for _, k := range p.Keys {
			m[k.KeyID] = k
		}
	}
	return m, nil
}

type keyState struct {
	Backend string `json:"backend"`
	KeyID   string `json:"key_id"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Trips   int    `json:"trips"`
}

// anthropicClient is the official Anthropic SDK pointed at Envoy with a
// virtual key (x-api-key, as Claude clients send it).
func (s *pstack) anthropicClient(key string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(s.envoyURL), aoption.WithAPIKey(key),
		aoption.WithMaxRetries(0), aoption.WithRequestTimeout(20*time.Second))
}

// anthropicStatus is the HTTP status of an Anthropic SDK error (0 if none).
func anthropicStatus(err error) int {
	var e *anthropic.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// metric sums the samples of one metric on swarmgate's admin /metrics
// whose labels include every pair of want.
func (s *pstack) metric(ctx context.Context, name string, want map[string]string) (float64, error) {
	status, body, err := get(ctx, s.adminURL+"/metrics", "")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %d", status)
	}
	var sum float64
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		labels := line[len(name):sp]
		ok := true
		for k, v := range want {
			ok = ok && strings.Contains(labels, k+`="`+v+`"`)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics line %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// envoyStats returns Envoy's admin /stats lines whose names match re.
func (s *pstack) envoyStats(ctx context.Context, re string) (string, error) {
	status, body, err := get(ctx, s.envoyAdmin+"/stats?filter="+url.QueryEscape(re), "")
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("/stats: %d %s", status, body)
	}
	return strings.TrimSpace(body), nil
}
