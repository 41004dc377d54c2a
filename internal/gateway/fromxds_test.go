package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/test/envoysim"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// TestFromXDSReplicaQueuesLikeServe: an `extproc --from-xds` replica whose
// own bootstrap file has no admission section takes admission.max_wait from
// the control plane, and holds a request for a key that is open exactly as
// `serve`'s own ext_proc does. (The field-by-field GatewayConfig once
// dropped the admission section, so such replicas refused at once.)
func TestFromXDSReplicaQueuesLikeServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	relay := mockupstream.New(mockupstream.Options{Keys: []mockupstream.Key{{ID: "k1", Value: secrets["RELAY_KEY_1"]}}})
	if _, err := relay.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })

	xdsL, epL, adminL, repL := listen(t), listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	render := func(extra string) []byte {
		y := fmt.Sprintf(gatewayYAML, xdsL.Addr(), epL.Addr(), rlsAddr, adminL.Addr(), rs.Addr, relay.Addr(),
			config.HashKey("sk-team"), extra)
		// One key, so a 429 leaves the backend with none, and a tenant
		// limit that does not get in the way.
		y = strings.Replace(y, "      - {id: k2, secret: env:RELAY_KEY_2}\n", "", 1)
		return []byte(strings.Replace(y, "limits: {rpm: 2}", "limits: {rpm: 1000}", 1))
	}
	dir := t.TempDir()
	cpPath, repPath := filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "replica.yaml")
	if err := os.WriteFile(cpPath, render("admission: {max_wait: 5s}\nbreaker: {consecutive_429: 1, cooldown: 1s, jitter: 0}\nretry: {num_retries: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(repPath, render(""), 0o600); err != nil {
		t.Fatal(err)
	}
	serve, stop := startServe(t, ctx, cpPath, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})
	defer stop()

	rep, err := New(Options{Roles: Roles{ExtProc: true}, FromXDS: true, ConfigPath: repPath, NodeID: "replica-1",
		Load: config.Options{LookupEnv: lookup}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Listeners: Listeners{ExtProc: repL}})
	if err != nil {
		t.Fatal(err)
	}
	repCtx, repCancel := context.WithCancel(ctx)
	repDone := make(chan error, 1)
	go func() { repDone <- rep.Run(repCtx) }()
	defer func() {
		repCancel()
		if err := <-repDone; err != nil {
			t.Errorf("replica Run: %v", err)
		}
	}()
	eventually(t, ctx, "the replica runs the control plane's config", func() bool {
		c := rep.Config()
		return c != nil && c.Admission.MaxWait.Duration == 5*time.Second
	})

	res, err := translator.Translate(serve.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []struct{ name, addr string }{{"serve", epL.Addr().String()}, {"from-xds replica", repL.Addr().String()}} {
		t.Run(target.name, func(t *testing.T) {
			sim, err := envoysim.FromXDS(res.Listeners[0], res.Routes, res.Clusters, translator.Endpoints(res.IR, translator.EndpointState{}),
				envoysim.XDSOptions{RoleHeader: contract.GRPCRoleHeader, ExtProcTargets: func(string) []string { return []string{target.addr} }})
			if err != nil {
				t.Fatal(err)
			}
			if err := sim.Start(ctx, "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			// The provider rate-limits the only key for 2 s: it opens.
			relay.SetBehavior("k1", mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 2 * time.Second})
			if code, body := post(t, ctx, sim.URL()); code != http.StatusTooManyRequests {
				t.Fatalf("first request: %d %s, want the provider's 429", code, body)
			}
			relay.SetBehavior("k1", mockupstream.Behavior{})
			// The next request finds no key and waits in the queue for
			// the reopening instead of being refused.
			start := time.Now()
			code, body := post(t, ctx, sim.URL())
			waited := time.Since(start)
			if code != http.StatusOK {
				t.Fatalf("request while the key is open: %d %s, want 200 after a wait in the queue", code, body)
			}
			if waited < 500*time.Millisecond {
				t.Errorf("answered after %s: the request did not wait for the key", waited)
			}
			t.Logf("served after %s in the queue", waited.Round(time.Millisecond))
		})
	}
}

func post(t *testing.T, ctx context.Context, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"small","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-team")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
