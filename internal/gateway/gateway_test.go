package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/test/envoysim"
	"github.com/swarmgate/swarmgate/xds/translator"
)

var secrets = map[string]string{"RELAY_KEY_1": "sk-relay-gw-1", "RELAY_KEY_2": "sk-relay-gw-2", "ADMIN_TOKEN": "admin-gw-token"}

func lookup(k string) (string, bool) { v, ok := secrets[k]; return v, ok }

const gatewayYAML = `
listen: {xds: %[1]s, extproc: %[2]s, ratelimit: %[3]s, admin: %[4]s}
redis: {addrs: [%[5]s]}
admin: {token: env:ADMIN_TOKEN}
backends:
  - name: relay
    base_url: http://%[6]s/v1
    keys:
      - {id: k1, secret: env:RELAY_KEY_1}
      - {id: k2, secret: env:RELAY_KEY_2}
models:
  - name: small
    targets: [{backend: relay, model: small-2026, price: {input_per_mtok: 1, output_per_mtok: 2}}]
tenants:
  - name: team
    keys: [{id: t1, hash: %[7]s}]
    models: ["*"]
    limits: {rpm: 2}
%[8]s`

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestServeEndToEnd runs every role of `swarmgate serve` in one Gateway, as
// the binary does, against a real redis-server and a mock relay, and drives
// it with the openai-go SDK through envoysim built from the resources the
// control plane serves. It then edits the watched config file, good and bad.
func TestServeEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	relay := mockupstream.New(mockupstream.Options{Keys: []mockupstream.Key{{ID: "k1", Value: secrets["RELAY_KEY_1"]}, {ID: "k2", Value: secrets["RELAY_KEY_2"]}}})
	if _, err := relay.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })

	xdsL, epL, adminL := listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	render := func(extra string) []byte {
		return fmt.Appendf(nil, gatewayYAML, xdsL.Addr(), epL.Addr(), rlsAddr, adminL.Addr(), rs.Addr, relay.Addr(),
			config.HashKey("sk-team"), extra)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, render(""), 0o600); err != nil {
		t.Fatal(err)
	}
	g, stop := startServe(t, ctx, path, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})

	cfg := g.Config()
	res, err := translator.Translate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := envoysim.FromXDS(res.Listeners[0], res.Routes, res.Clusters, translator.Endpoints(res.IR, translator.EndpointState{}),
		envoysim.XDSOptions{RoleHeader: contract.GRPCRoleHeader, ExtProcTargets: func(string) []string { return []string{epL.Addr().String()} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	client := func(key string) *openai.Client {
		c := openai.NewClient(option.WithBaseURL(sim.URL()+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		return &c
	}

	// A chat completion through the whole data path; both keys get used.
	for i := 0; i < 4; i++ {
		out, err := client("sk-team").Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
		if err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
		if out.Usage.TotalTokens == 0 {
			t.Fatalf("chat %d: no usage", i)
		}
	}
	for _, r := range relay.Requests() {
		if r.Model != "small-2026" {
			t.Fatalf("relay saw model %q, want the upstream name small-2026", r.Model)
		}
	}
	if relay.Count("k1").OK == 0 || relay.Count("k2").OK == 0 {
		t.Fatalf("key rotation: k1=%+v k2=%+v", relay.Count("k1"), relay.Count("k2"))
	}

	admin := "http://" + adminL.Addr().String()
	// admin.token guards every endpoint but the probes.
	for path, want := range map[string]int{"/keys": http.StatusUnauthorized, "/metrics": http.StatusUnauthorized,
		"/admission": http.StatusUnauthorized, "/readyz": http.StatusOK} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without the admin token: %d, want %d", path, resp.StatusCode, want)
		}
	}
	eventually(t, ctx, "ledger shows 4 requests", func() bool {
		body := get(t, admin+"/usage?tenant=team")
		return strings.Contains(body, `"requests":4`)
	})
	metrics := get(t, admin+"/metrics")
	for _, want := range []string{`swarmgate_requests_total{backend="relay",model="small",status="200",tenant="team"} 4`, "swarmgate_xds_pushes_total", "swarmgate_keypool_picks_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if keys := get(t, admin+"/keys"); !strings.Contains(keys, `"key_id": "k1"`) || strings.Contains(keys, secrets["RELAY_KEY_1"]) {
		t.Errorf("/keys: want key ids and no secret, got %s", keys)
	}
	// The queue is wired and on by default (admission.max_wait 10s).
	if q := get(t, admin+"/admission"); !strings.Contains(q, `"queueing": true`) || !strings.Contains(q, `"max_wait_seconds": 10`) ||
		!strings.Contains(q, `"counters"`) || !strings.Contains(q, `"scopes": []`) {
		t.Errorf("/admission: want the wired queue, on by default, got %s", q)
	}

	// The embedded rate-limit service took its config from our control
	// plane: team's 2 RPM holds.
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	var codes []rlspb.RateLimitResponse_Code
	for i := 0; i < 3; i++ {
		r, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: cfg.Envoy.RateLimitDomain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: contract.DescTenant, Value: "team"}, {Key: contract.DescLimit, Value: contract.LimitRPM}}}}}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.GetOverallCode())
	}
	if codes[1] != rlspb.RateLimitResponse_OK || codes[2] != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("tenant rpm 2 via the embedded service: got %v", codes)
	}

	// A good edit adds a tenant; it works without a restart.
	newTenant := fmt.Sprintf("  - {name: late, keys: [{id: l1, hash: %s}], models: [small]}\n", config.HashKey("sk-late"))
	if err := os.WriteFile(path, render(newTenant), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the added tenant's key is accepted", func() bool {
		_, err := client("sk-late").Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return err == nil
	})
	// /usage answers from the reloaded config too: the new tenant is known.
	if body := get(t, admin+"/usage?tenant=late"); !strings.Contains(body, `"tenant":"late"`) {
		t.Errorf("/usage of the tenant added by the reload: %s", body)
	}

	// A broken edit is rejected; the last good config keeps serving.
	if err := os.WriteFile(path, []byte("backends: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the broken edit is counted", func() bool {
		return strings.Contains(get(t, admin+"/metrics"), "swarmgate_config_watch_rejected_total 1")
	})
	if _, err := client("sk-late").Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("still there?")}}); err != nil {
		t.Fatalf("after a broken edit: %v", err)
	}

	stop()
}

// startServe runs every role on the config file at path until ready; stop
// ends Run and fails the test unless it returns cleanly within 20 s.
func startServe(t *testing.T, ctx context.Context, path string, l Listeners) (g *Gateway, stop func()) {
	t.Helper()
	return startServeWith(t, ctx, path, l, func(*Options) {})
}

// startServeWith is startServe with the options changed by edit.
func startServeWith(t *testing.T, ctx context.Context, path string, l Listeners, edit func(*Options)) (g *Gateway, stop func()) {
	t.Helper()
	ready := make(chan struct{})
	o := Options{
		Roles: All, ConfigPath: path, Load: config.Options{LookupEnv: lookup},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Listeners: l, Ready: ready,
	}
	edit(&o)
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	go func() { done <- g.Run(runCtx) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("gateway stopped before ready: %v", err)
	case <-ctx.Done():
		cancel()
		t.Fatal("gateway not ready")
	}
	return g, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("gateway did not shut down")
		}
	}
}

// get reads an admin endpoint with the admin token.
func get(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secrets["ADMIN_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A role that cannot start (its port is taken) fails Run with the reason,
// after stopping the roles already started: Run returns, nothing hangs.
func TestServeFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	rs := redistest.Start(t)
	busy := listen(t) // held: the admin server cannot bind it
	defer busy.Close()
	xdsAddr := porttest.Addr(t)
	yaml := fmt.Sprintf(gatewayYAML, xdsAddr, porttest.Addr(t), porttest.Addr(t), busy.Addr(), rs.Addr, "127.0.0.1:9",
		config.HashKey("sk-team"), "")
	cfg, err := config.Parse([]byte(yaml), "busy.yaml", config.Options{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Roles: All, Initial: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
			t.Fatalf("Run: %v, want a listen error naming %s", err, busy.Addr())
		}
		// The control plane started before admin failed; it must be gone.
		l, err := net.Listen("tcp", xdsAddr)
		if err != nil {
			t.Fatalf("xDS port still held after a failed Run: %v", err)
		}
		l.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after a failed setup")
	}
}

// TestReplicaIDPerProcess: two processes given one node id get distinct
// identities in the key pools' shared state, each naming the node.
func TestReplicaIDPerProcess(t *testing.T) {
	a, b := replicaID("gw"), replicaID("gw")
	if a == b {
		t.Fatalf("two processes with node id gw share the replica id %q", a)
	}
	for _, id := range []string{a, b} {
		if !strings.HasPrefix(id, "gw-") {
			t.Errorf("replica id %q does not name node gw", id)
		}
	}
}
