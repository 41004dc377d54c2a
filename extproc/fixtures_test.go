package extproc_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// Virtual keys of the test config (only their hashes are in it).
const (
	keyAlpha   = "sk-alpha"
	keyBeta    = "sk-beta"
	keyRevoked = "sk-revoked"
)

func testYAML() string {
	return `
request:
  max_body_bytes: 4096
  long_max_tokens: 2000
  long_when_tools: true
  default_max_output_tokens: 100
  bytes_per_token: 4
backends:
  - name: small
    base_url: http://127.0.0.1:9/openai/v1
    auth: api-key
    headers: {x-tenant-route: blue}
    keys:
      - {id: small-1, secret: env:K_SMALL_1}
  - name: big
    base_url: http://127.0.0.1:9/v1
    auth: bearer
    keys:
      - {id: big-1, secret: env:K_BIG_1}
      - {id: big-2, secret: env:K_BIG_2}
models:
  - name: chat
    targets:
      - {backend: small, context_window: 1000}
      - {backend: big, model: vendor/chat-large, context_window: 8000, priority: 1}
  - name: secret-model
    targets: [{backend: big}]
  - name: agent
    long_running: true
    targets: [{backend: big}]
tenants:
  - name: alpha
    models: [chat, agent]
    keys:
      - {id: alpha-1, hash: ` + config.HashKey(keyAlpha) + `}
      - {id: alpha-old, hash: ` + config.HashKey(keyRevoked) + `, revoked: true}
  - name: beta
    models: ["*"]
    keys:
      - {id: beta-1, hash: ` + config.HashKey(keyBeta) + `}
`
}

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	env := map[string]string{"K_SMALL_1": "upstream-small-1", "K_BIG_1": "upstream-big-1", "K_BIG_2": "upstream-big-2"}
	c, err := config.Parse([]byte(testYAML()), "test.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// capture records what extproc hands to the accounting interfaces.
type capture struct {
	mu       sync.Mutex
	entries  []extproc.Entry
	settled  map[string]int64
	released map[string]bool
	reserved []extproc.ReserveRequest
	grant    bool
	refusals []string
	done     chan struct{}
}

func newCapture() *capture {
	return &capture{settled: map[string]int64{}, released: map[string]bool{}, grant: true, done: make(chan struct{}, 16)}
}

func (c *capture) Record(_ context.Context, e extproc.Entry) error {
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.mu.Unlock()
	select {
	case c.done <- struct{}{}:
	default: // benchmarks do not wait for entries
	}
	return nil
}

func (c *capture) Reserve(_ context.Context, r extproc.ReserveRequest) (extproc.Reservation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved = append(c.reserved, r)
	if !c.grant {
		return extproc.Reservation{Granted: false, Scope: "tenant", RetryAfter: 1500 * time.Millisecond, Limit: 1000, Remaining: 10, Reset: 1500 * time.Millisecond}, nil
	}
	return extproc.Reservation{ID: "res-" + r.RequestID, Granted: true, Handle: r}, nil
}

func (c *capture) Leave(context.Context, extproc.ReserveRequest) error { return nil }

func (c *capture) Settle(_ context.Context, res extproc.Reservation, e extproc.Entry) error {
	c.mu.Lock()
	c.settled[res.ID] = e.Usage.TotalTokens
	c.mu.Unlock()
	return nil
}

func (c *capture) Release(_ context.Context, res extproc.Reservation) error {
	c.mu.Lock()
	c.released[res.ID] = true
	c.mu.Unlock()
	select {
	case c.done <- struct{}{}:
	default:
	}
	return nil
}

func (c *capture) Refused(tenant, model string, status int, code, reason string) {
	c.mu.Lock()
	c.refusals = append(c.refusals, code)
	c.mu.Unlock()
}

func (c *capture) waitEntry(t *testing.T) extproc.Entry {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no ledger entry")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return extproc.Entry{}
	}
	return c.entries[len(c.entries)-1]
}

type harness struct {
	srv  *extproc.Server
	cap  *capture
	pool *keypool.Pools
	conn *grpc.ClientConn
}

func newHarness(t testing.TB, cfg *config.Config, mods ...func(*extproc.Options)) *harness {
	t.Helper()
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newCapture()
	opts := extproc.Options{Config: cfg, Keys: wire.Keys(pools), Usage: wire.Usage(), Reserver: c, Ledger: c, Refusals: c}
	for _, m := range mods {
		m(&opts)
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
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return &harness{srv: srv, cap: c, pool: pools, conn: conn}
}

// stream opens an ext_proc stream as Envoy would for the role.
func (h *harness) stream(t testing.TB, role string) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ctx = metadata.AppendToOutgoingContext(ctx, contract.GRPCRoleHeader, role)
	st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, cancel
}

func roundTrip(t testing.TB, st extprocv3.ExternalProcessor_ProcessClient, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func reqHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}}}
}

func reqBody(b string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: true}}}
}

func respHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}}}
}

func respBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// setOf maps a mutation's set headers by name, checking Envoy's rules:
// raw_value only, explicit overwrite.
func setOf(t testing.TB, m *extprocv3.HeaderMutation) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range m.GetSetHeaders() {
		if o.GetHeader().GetValue() != "" {
			t.Errorf("header %s uses value, not raw_value", o.GetHeader().GetKey())
		}
		if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Errorf("header %s append_action %v", o.GetHeader().GetKey(), o.GetAppendAction())
		}
		out[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	return out
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "internal", "accounting", "usage", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}
