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
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/gatewaytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// Virtual keys of the test tenants; the config stores only their hashes.
const (
	keyTeam    = "sk-e2e-envoy-team"
	keyLimited = "sk-e2e-envoy-limited"
)

// upstreamKeys are the relays' credentials, by env: reference name.
var upstreamKeys = map[string]string{
	"E2E_A1": "relay-a-secret-1", "E2E_A2": "relay-a-secret-2", "E2E_B1": "relay-b-secret-1",
}

type stack struct {
	cfg            *config.Config
	bootstrapPath  string // Envoy bootstrap generated from cfg
	relayA, relayB *mockupstream.Server
	envoyURL       string // http://127.0.0.1:PORT, Envoy's listener
	envoyAdmin     string
	adminURL       string // swarmgate's admin
}

func gatewayYAML(listen map[string]string, envoyPort int, redisAddr, relayA, relayB string) string {
	return fmt.Sprintf(`
listen:
  xds: %s
  extproc: %s
  ratelimit: %s
  admin: %s
envoy:
  listener_address: 127.0.0.1
  listener_port: %d
redis:
  addrs: [%s]
request:
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_429: 1
  consecutive_5xx: 1
  sync_interval: 50ms
backends:
  - name: relay-a
    base_url: http://%s/v1
    auth: bearer
    keys:
      - {id: relay-a-1, secret: env:E2E_A1}
      - {id: relay-a-2, secret: env:E2E_A2}
  - name: relay-b
    base_url: http://%s/openai/v1
    auth: x-api-key
    keys:
      - {id: relay-b-1, secret: env:E2E_B1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, context_window: 128000, price: {input_per_mtok: 0.15, output_per_mtok: 0.60}}
      - {backend: relay-b, model: openai/gpt-4o-mini, priority: 1, context_window: 128000}
  # One priority only: a retry stays on relay-a, so a 429 moves to its other key.
  - name: solo
    targets:
      - {backend: relay-a}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: %s}
    limits: {rpm: 10000, tpm: 10000000}
  - name: limited
    models: ["*"]
    keys:
      - {id: limited-1, hash: %s}
    limits: {rpm: 2}
`, listen["xds"], listen["extproc"], listen["ratelimit"], listen["admin"], envoyPort, redisAddr, relayA, relayB,
		config.HashKey(keyTeam), config.HashKey(keyLimited))
}

func startRelay(t *testing.T, ctx context.Context, auth config.AuthStyle, ids map[string]string) *mockupstream.Server {
	t.Helper()
	var keys []mockupstream.Key
	for id, env := range ids {
		keys = append(keys, mockupstream.Key{ID: id, Value: upstreamKeys[env]})
	}
	s := mockupstream.New(mockupstream.Options{Auth: auth, Keys: keys, CompletionTokens: 7,
		Models: []string{"gpt-4o-mini", "openai/gpt-4o-mini"}})
	if _, err := s.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// freeAddr is a port no other test holds, for the servers that bind
// their own sockets (the rate-limit service, Envoy).
func freeAddr(t *testing.T) (string, int) {
	t.Helper()
	p := porttest.Port(t)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), p
}

// startStack runs Redis, two relays, the whole swarmgate and Envoy, and
// returns once Envoy routes a request.
func startStack(t *testing.T, r envoytest.Release) *stack {
	t.Helper()
	s := startSwarmgate(t)
	startEnvoy(t, r.Path, s.bootstrapPath)
	s.waitRouted(t)
	return s
}

// Ports are the addresses a test config must use: the gateway's listeners,
// Envoy's listener port and the test's own redis-server.
type Ports struct {
	XDS, ExtProc, RateLimit, Admin string
	EnvoyPort                      int
	Redis                          string
}

// startSwarmgate runs Redis, two relays and the whole swarmgate in-process
// on the standard test config, and writes the Envoy bootstrap for it.
func startSwarmgate(t *testing.T) *stack {
	t.Helper()
	return startSwarmgateWith(t, func(s *stack, p Ports) string {
		return gatewayYAML(map[string]string{"xds": p.XDS, "extproc": p.ExtProc, "ratelimit": p.RateLimit, "admin": p.Admin},
			p.EnvoyPort, p.Redis, s.relayA.Addr().String(), s.relayB.Addr().String())
	})
}

// startSwarmgateWith is startSwarmgate on the config mk writes for the
// stack's ports; mk may use s.relayA and s.relayB (started before it is
// called) and start relays of its own. Upstream secrets resolve from
// upstreamKeys.
func startSwarmgateWith(t *testing.T, mk func(s *stack, p Ports) string) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	rs := redistest.Start(t)
	s := &stack{}
	s.relayA = startRelay(t, ctx, config.AuthBearer, map[string]string{"relay-a-1": "E2E_A1", "relay-a-2": "E2E_A2"})
	s.relayB = startRelay(t, ctx, config.AuthXAPIKey, map[string]string{"relay-b-1": "E2E_B1"})

	lisXDS, lisExtProc, lisAdmin := listen(t), listen(t), listen(t)
	rlsAddr, _ := freeAddr(t)
	_, envoyPort := freeAddr(t)
	envoyAdmin, _ := freeAddr(t)
	addrs := map[string]string{"xds": lisXDS.Addr().String(), "extproc": lisExtProc.Addr().String(),
		"ratelimit": rlsAddr, "admin": lisAdmin.Addr().String()}
	yml := mk(s, Ports{XDS: addrs["xds"], ExtProc: addrs["extproc"], RateLimit: rlsAddr, Admin: addrs["admin"],
		EnvoyPort: envoyPort, Redis: rs.Addr})
	cfg, err := config.Parse([]byte(yml), "e2e-envoy.yaml", config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := upstreamKeys[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg

	gatewaytest.Start(t, gateway.Options{
		Roles: gateway.All, Initial: cfg, NodeID: "e2e-envoy", Version: "e2e",
		Logger:    gatewaytest.Logger(t, slog.LevelWarn),
		Listeners: gateway.Listeners{XDS: lisXDS, ExtProc: lisExtProc, Admin: lisAdmin},
	})
	s.adminURL = "http://" + addrs["admin"]

	// Envoy, bootstrapped from our control plane. Admin on a free loopback
	// port so parallel runs on one machine do not collide on 9901.
	s.bootstrapPath = gatewaytest.WriteBootstrap(t, cfg, "e2e-envoy-1", envoyAdmin)
	s.envoyAdmin = "http://" + envoyAdmin
	s.envoyURL = fmt.Sprintf("http://127.0.0.1:%d", envoyPort)
	return s
}

// startEnvoy runs Envoy until the test ends; its log is printed when the
// test fails.
func startEnvoy(t *testing.T, bin, bootstrapPath string) {
	t.Helper()
	envoyproc.Start(t, bin, bootstrapPath)
}

// waitRouted polls until Envoy is live and answers /v1/models through the
// generated route table (LDS, RDS, CDS and EDS have all arrived).
func (s *stack) waitRouted(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		status, body, err := get(ctx, s.envoyAdmin+"/ready", "")
		if err == nil && status == http.StatusOK {
			status, body, err = get(ctx, s.envoyURL+"/v1/models", keyTeam)
			if err == nil && status == http.StatusOK {
				return
			}
		}
		last = fmt.Sprintf("status %d, body %.200q, err %v", status, body, err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("Envoy did not route within 30s: last %s", last)
}

func get(ctx context.Context, url, key string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (s *stack) client(key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(0), option.WithRequestTimeout(20*time.Second))
}

func (s *stack) chat(ctx context.Context, key, model, text string) (*openai.ChatCompletion, error) {
	c := s.client(key)
	return c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	})
}

// usage is the part of the admin /usage report the tests read.
type usage struct {
	Total struct {
		Requests     int64 `json:"requests"`
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"total"`
}

func (s *stack) usage(ctx context.Context, tenant string) (usage, error) {
	var u usage
	status, body, err := get(ctx, s.adminURL+"/usage?tenant="+tenant, "")
	if err != nil {
		return u, err
	}
	if status != http.StatusOK {
		return u, fmt.Errorf("/usage: status %d: %s", status, body)
	}
	return u, json.Unmarshal([]byte(body), &u)
}

func statusOf(err error) int {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 50ms until it holds or ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var why string
	for {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %s", what, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
