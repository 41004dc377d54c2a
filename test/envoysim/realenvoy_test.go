package envoysim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// realEnvoy is one Envoy process of a release, fed over ADS from this
// test process. Each differential case pushes a new snapshot (a listener
// of its own on a fresh port, its clusters) instead of restarting Envoy.
type realEnvoy struct {
	rel   envoytest.Release
	cache cachev3.SnapshotCache
	admin string
	proc  *envoyproc.Process

	mu      sync.Mutex
	version int
	nack    string
}

const realNode = "envoysim-diff"

func startRealEnvoy(t *testing.T, rel envoytest.Release) *realEnvoy {
	t.Helper()
	e := &realEnvoy{rel: rel, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			e.mu.Lock()
			e.nack = req.GetTypeUrl() + ": " + d.GetMessage()
			e.mu.Unlock()
		}
		return nil
	}}
	srv := serverv3.NewServer(ctx, e.cache, cb)
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	dir := t.TempDir()
	_, xdsPort, _ := splitAddr(lis.Addr().String())
	boot := fmt.Sprintf(`{
  "node": {"id": %q, "cluster": %q},
  "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
  "dynamic_resources": {
    "ads_config": {"api_type": "GRPC", "transport_api_version": "V3", "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}]},
    "cds_config": {"ads": {}, "resource_api_version": "V3"},
    "lds_config": {"ads": {}, "resource_api_version": "V3"}
  },
  "static_resources": {"clusters": [{
    "name": "xds", "type": "STATIC", "connect_timeout": "2s",
    "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
      "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
      "explicit_http_config": {"http2_protocol_options": {}}}},
    "load_assignment": {"cluster_name": "xds", "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
      {"socket_address": {"address": "127.0.0.1", "port_value": %d}}}}]}]}
  }]}
}`, realNode, realNode, xdsPort)
	bootPath := filepath.Join(dir, "bootstrap.json")
	adminPath := filepath.Join(dir, "admin")
	if err := os.WriteFile(bootPath, []byte(boot), 0o600); err != nil {
		t.Fatal(err)
	}
	// One worker: the suite runs on two shared cores, and one worker makes
	// every connection see the same filter chain state.
	e.proc = envoyproc.Start(t, rel.Path, bootPath, "--concurrency", "1", "--admin-address-path", adminPath)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
			e.admin = "http://" + strings.TrimSpace(string(b))
			break
		}
		select {
		case <-e.proc.Exited():
			t.Fatalf("envoy %s exited: %s", rel.Version, e.proc.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy %s wrote no admin address in 20s: %s", rel.Version, e.proc.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// apply pushes x and waits until Envoy serves it: the listener active and
// every cluster known. It returns the listener's address. A rejected
// config fails the test with Envoy's reason.
func (e *realEnvoy) apply(t *testing.T, x *XDS) string {
	t.Helper()
	e.mu.Lock()
	e.version++
	v := strconv.Itoa(e.version)
	e.nack = ""
	e.mu.Unlock()
	cl := make([]types.Resource, 0, len(x.Clusters))
	for _, c := range x.Clusters {
		cl = append(cl, c)
	}
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{
		resource.ClusterType:  cl,
		resource.ListenerType: {x.Listener},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cache.SetSnapshot(context.Background(), realNode, snap); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		e.mu.Lock()
		nack := e.nack
		e.mu.Unlock()
		if nack != "" {
			t.Fatalf("envoy %s rejected the config: %s", e.rel.Version, nack)
		}
		if addr := e.serves(x); addr != "" {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy %s did not apply config %s in 15s", e.rel.Version, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serves returns the address of x's listener once it is active (admin
// /listeners prints "name::address") and every cluster is known.
func (e *realEnvoy) serves(x *XDS) string {
	lis, err := e.adminGet("/listeners")
	if err != nil {
		return ""
	}
	addr := ""
	for _, l := range strings.Split(lis, "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(l), x.Listener.GetName()+"::"); ok {
			addr = a
		}
	}
	if addr == "" || strings.HasSuffix(addr, ":0") {
		return ""
	}
	cls, err := e.adminGet("/clusters")
	if err != nil {
		return ""
	}
	for _, c := range x.Clusters {
		if !strings.Contains(cls, "\n"+c.GetName()+"::") && !strings.HasPrefix(cls, c.GetName()+"::") {
			return ""
		}
	}
	return addr
}

func (e *realEnvoy) adminGet(path string) (string, error) {
	resp, err := http.Get(e.admin + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (e *realEnvoy) adminPost(path string) (string, error) {
	resp, err := http.Post(e.admin+path, "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
