package swarm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/gatewaytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// envoyStack is a swarm stack on the real Envoy: the whole swarmgate in
// this process as `swarmgate serve` runs it (control plane, ext_proc,
// rate-limit service, admin; one replica), the same mock relays and a
// real redis-server, and an Envoy process bootstrapped from swarmgate's
// control plane. The spec's replica layout does not apply (one process).
type envoyStack struct {
	cfg    *config.Config
	relays map[string]*mockupstream.Server
	url    string         // Envoy's listener
	ledger *ledger.Ledger // reads the ledger swarmgate writes
	envoy  *envoyproc.Process
}

func startEnvoyStack(t *testing.T, sp stackSpec, rel envoytest.Release) *envoyStack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	s := &envoyStack{}
	relays, addrs := startRelays(t, ctx, sp.relays)
	s.relays = relays

	lisXDS, lisExtProc, lisAdmin := listenLocal(t), listenLocal(t), listenLocal(t)
	rlsAddr, envoyAddr, envoyAdmin := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	_, envoyPort, _ := net.SplitHostPort(envoyAddr)
	yml := fmt.Sprintf("listen:\n  xds: %s\n  extproc: %s\n  ratelimit: %s\n  admin: %s\nenvoy:\n  listener_address: 127.0.0.1\n  listener_port: %s\n",
		lisXDS.Addr(), lisExtProc.Addr(), rlsAddr, lisAdmin.Addr(), envoyPort) + sp.yaml(addrs, rs.Addr)
	cfg, err := config.Parse([]byte(yml), "swarm-envoy.yaml", config.Options{LookupEnv: relaySecrets(sp.relays)})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	s.ledger = ledger.New(rs.Client(), ledger.OptionsFrom(cfg))

	gatewaytest.Start(t, gateway.Options{
		Roles: gateway.All, Initial: cfg, NodeID: "swarm-envoy", Version: "swarm",
		// Errors only: a swarm run makes thousands of expected warnings
		// (keys tripping, quota ends).
		Logger:    gatewaytest.Logger(t, slog.LevelError),
		Listeners: gateway.Listeners{XDS: lisXDS, ExtProc: lisExtProc, Admin: lisAdmin},
	})
	s.envoy = envoyproc.Start(t, rel.Path, gatewaytest.WriteBootstrap(t, cfg, "swarm-envoy-1", envoyAdmin))
	s.url = "http://" + envoyAddr
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := envoyproc.WaitReady(wctx, "http://"+envoyAdmin); err != nil {
		t.Fatal(err)
	}
	// Routed: /v1/models answers through the generated route table (LDS,
	// RDS, CDS and EDS have all arrived).
	hc := newHTTPClient()
	if !waitFor(60*time.Second, func() bool {
		req, _ := http.NewRequestWithContext(wctx, http.MethodGet, s.url+"/v1/models", nil)
		req.Header.Set("authorization", "Bearer "+agentKey)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatal("Envoy did not route /v1/models within 60s")
	}
	return s
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
