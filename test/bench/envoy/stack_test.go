package envoybench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/childproc"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/xds/bootstrap"
)

const (
	model      = "chat"
	virtualKey = "sk-bench-agent"
	relayKeys  = 4
)

func relaySecret(i int) string { return fmt.Sprintf("sk-bench-relay-%d", i+1) }

// benchStack is one Envoy with two listeners (swarmgate's and a plain one)
// in front of one mock relay, and swarmgate serving as its own process.
type benchStack struct {
	envoy        envoytest.Release
	sgURL        string // Envoy's swarmgate listener
	plainURL     string // Envoy's plain listener: router only, to the relay
	envoyAdmin   string
	envoyPID     int
	swarmgatePID int
}

// startBench builds and starts everything; it returns once both listeners
// answer /v1/models.
func startBench(b *testing.B) *benchStack {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	rel := envoytest.Newest(b)
	rs := redistest.Start(b)

	var keys []mockupstream.Key
	env := os.Environ()
	for i := range relayKeys {
		keys = append(keys, mockupstream.Key{ID: fmt.Sprintf("k%d", i+1), Value: relaySecret(i)})
		env = append(env, fmt.Sprintf("BENCH_K%d=%s", i+1, relaySecret(i)))
	}
	// No delays: the relay answers at once, so what is measured is the
	// path in front of it. MaxRecords 1: no history kept.
	relay := mockupstream.New(mockupstream.Options{Keys: keys, Models: []string{model}, CompletionTokens: 16, MaxRecords: 1})
	if _, err := relay.Start(ctx, "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = relay.Close() })

	dir := b.TempDir()
	bin := filepath.Join(dir, "swarmgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/swarmgate/swarmgate/cmd/swarmgate").CombinedOutput(); err != nil {
		b.Fatalf("go build swarmgate: %v\n%s", err, out)
	}
	xdsA, epA, rlsA, adminA := porttest.Addr(b), porttest.Addr(b), porttest.Addr(b), porttest.Addr(b)
	sgA, plainA, envoyAdmin := porttest.Addr(b), porttest.Addr(b), porttest.Addr(b)
	_, sgPort, _ := net.SplitHostPort(sgA)
	var ks bytes.Buffer
	for i := range relayKeys {
		fmt.Fprintf(&ks, "      - {id: k%d, secret: env:BENCH_K%d}\n", i+1, i+1)
	}
	yml := fmt.Sprintf(`listen: {xds: %s, extproc: %s, ratelimit: %s, admin: %s}
envoy: {listener_address: 127.0.0.1, listener_port: %s}
redis: {addrs: [%s]}
# Cost is measured, not timeouts: bounds far above any answer on a
# loaded shared machine (5 s let a few 1,000-client requests time out).
request: {message_timeout: 30s, timeout: 60s}
backends:
  - name: relay
    base_url: http://%s/v1
    auth: bearer
    keys:
%smodels:
  - name: %s
    targets: [{backend: relay}]
tenants:
  - name: bench
    models: [%s]
    keys: [{id: bench-1, hash: %s}]
`, xdsA, epA, rlsA, adminA, sgPort, rs.Addr, relay.Addr(), ks.String(), model, model, config.HashKey(virtualKey))
	cfgPath := filepath.Join(dir, "swarmgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	lookup := func(k string) (string, bool) {
		for i := range relayKeys {
			if k == fmt.Sprintf("BENCH_K%d", i+1) {
				return relaySecret(i), true
			}
		}
		return "", false
	}
	cfg, err := config.Parse([]byte(yml), cfgPath, config.Options{LookupEnv: lookup})
	if err != nil {
		b.Fatal(err)
	}

	sg := childproc.Command(bin, "serve", "--config", cfgPath, "--log-level", "error", "--node-id", "bench")
	sg.Env = env
	var sgLog logbuf.Buffer
	sg.Stdout, sg.Stderr = &sgLog, &sgLog
	if err := sg.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sg.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = sg.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = sg.Process.Kill()
			<-exited
		}
		if b.Failed() {
			b.Logf("swarmgate log:\n%s", sgLog.String())
		}
	})
	if !poll(ctx, 60*time.Second, func() bool { return get("http://"+adminA+"/readyz", "") == http.StatusOK }) {
		b.Fatalf("swarmgate not ready within 60s:\n%s", sgLog.String())
	}

	bs, err := bootstrap.Build(cfg, "bench-envoy", bootstrap.Options{AdminAddress: envoyAdmin})
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("ENVOY_BENCH_STOCK") != "1" {
		bs.LayeredRuntime = raiseServiceBreakers(b)
	}
	bs.StaticResources.Listeners = append(bs.StaticResources.Listeners, plainListener(b, plainA))
	bs.StaticResources.Clusters = append(bs.StaticResources.Clusters, plainCluster(b, relay.Addr().String()))
	yb, err := bootstrap.Marshal(bs)
	if err != nil {
		b.Fatal(err)
	}
	bsPath := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(bsPath, yb, 0o600); err != nil {
		b.Fatal(err)
	}
	ep := envoyproc.Start(b, rel.Path, bsPath)
	s := &benchStack{envoy: rel, sgURL: "http://" + sgA, plainURL: "http://" + plainA, envoyPID: ep.PID(), swarmgatePID: sg.Process.Pid,
		envoyAdmin: "http://" + envoyAdmin}
	if !poll(ctx, 60*time.Second, func() bool {
		return get(s.sgURL+"/v1/models", virtualKey) == http.StatusOK && get(s.plainURL+"/v1/models", relaySecret(0)) == http.StatusOK
	}) {
		b.Fatalf("Envoy did not route both listeners within 60s:\n%s", ep.Log())
	}
	return s
}

// raiseServiceBreakers lifts the circuit breakers of the ext_proc and
// rate-limit service clusters (Envoy's default: 1,024 requests) through
// runtime overrides. Every request in flight holds a router-level ext_proc
// stream, and its attempt an upstream one, so at 1,000 concurrent the
// default overflows and Envoy answers 500 (ENVOY_BENCH_STOCK=1 shows it);
// the generated clusters do not set them yet.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/upstream/cluster_manager/cluster_runtime#circuit-breaking
func raiseServiceBreakers(b *testing.B) *bootstrapv3.LayeredRuntime {
	limits := map[string]any{"max_connections": 100000, "max_pending_requests": 100000, "max_requests": 100000}
	layer, err := structpb.NewStruct(map[string]any{"circuit_breakers": map[string]any{
		contract.ClusterExtProc:   map[string]any{"default": limits},
		contract.ClusterRateLimit: map[string]any{"default": limits},
	}})
	if err != nil {
		b.Fatal(err)
	}
	return &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{{Name: "bench",
		LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: layer}}}}
}

// overflowStats is Envoy's overflow counters, for a failed run's log.
func (s *benchStack) overflowStats() string {
	resp, err := http.Get(s.envoyAdmin + "/stats?filter=overflow")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	b, _ := io.ReadAll(resp.Body)
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 && !bytes.HasSuffix(l, []byte(": 0")) {
			out.Write(l)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// plainListener is an HTTP listener with the router filter only, every
// path to the relay: what Envoy costs without swarmgate.
func plainListener(b *testing.B, addr string) *listenerv3.Listener {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "plain",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "plain",
			VirtualHosts: []*routev3.VirtualHost{{Name: "plain", Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "plain_relay"},
					Timeout:          durationpb.New(30 * time.Second),
				}},
			}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(b, &routerv3.Router{})}}},
	}
	return &listenerv3.Listener{
		Name:    "plain",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(b, hcm)}}}}},
	}
}

// plainCluster is the relay as one static endpoint, with circuit breakers
// above any concurrency the benchmark runs.
func plainCluster(b *testing.B, addr string) *clusterv3.Cluster {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	high := wrapperspb.UInt32(100000)
	return &clusterv3.Cluster{
		Name:                 "plain_relay",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(5 * time.Second),
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections: high, MaxPendingRequests: high, MaxRequests: high}}},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: "plain_relay", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}},
			}}}},
		}}},
	}
}

func mustAny(b *testing.B, m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// get returns the status of a GET (0 on a transport error).
func get(url, key string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	if key != "" {
		req.Header.Set("authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// poll checks cond every 100 ms until it holds or within passes.
func poll(ctx context.Context, within time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return true
}
