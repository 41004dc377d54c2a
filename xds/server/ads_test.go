package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/translator"
)

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// deltaClient is an Envoy-like incremental xDS client on one ADS stream.
type deltaClient struct {
	t  testing.TB
	st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func newDeltaClient(t testing.TB, ctx context.Context, cc *grpc.ClientConn, node *corev3.Node) *deltaClient {
	t.Helper()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, st: st}
}

func (d *deltaClient) subscribe(typeURL string, names []string) {
	d.t.Helper()
	if err := d.st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		d.t.Fatal(err)
	}
}

// recv reads one response and ACKs it.
func (d *deltaClient) recv() (*discoveryv3.DeltaDiscoveryResponse, error) {
	r, err := d.st.Recv()
	if err != nil {
		return nil, err
	}
	return r, d.st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

func (d *deltaClient) recvType(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	d.t.Helper()
	for {
		r, err := d.recv()
		if err != nil {
			d.t.Fatalf("waiting for %s: %v", typeURL, err)
		}
		if r.GetTypeUrl() == typeURL {
			return r
		}
	}
}

func envoyNode(id string) *corev3.Node { return &corev3.Node{Id: id, Cluster: "swarmgate"} }

// TestDeltaEDSOnlyHealthUpdate: an Envoy-like Delta client gets CDS, then
// EDS; a backend health change produces one EDS delta with only the pools
// that use that backend, and no CDS push. The latency from the health signal
// to the client's Recv is logged (docs/xds.md quotes it).
func TestDeltaEDSOnlyHealthUpdate(t *testing.T) {
	health := newTestHealth()
	cfg := parseConfig(t, gatewayYAML(map[string][]string{
		"m1": {"a@127.0.0.1:9001,1,0", "b@127.0.0.1:9002,1,1"},
		"m2": {"b@127.0.0.1:9002,1,0"},
		"m3": {"c@127.0.0.1:9003,1,0", "a@127.0.0.1:9001,1,1"},
	}))
	cp := New(Options{Health: health})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := newDeltaClient(t, ctx, dial(t, startControlPlane(t, cp)), envoyNode("envoy-1"))
	cds := d.recvType(resource.ClusterType)
	var pools []string
	for _, r := range cds.GetResources() {
		var c clusterv3.Cluster
		if err := r.GetResource().UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetEdsClusterConfig() != nil {
			pools = append(pools, c.GetName())
		}
	}
	sort.Strings(pools)
	if want := []string{"pool_m1", "pool_m2", "pool_m3"}; !slices.Equal(pools, want) {
		t.Fatalf("EDS clusters %v, want %v", pools, want)
	}
	if len(cds.GetResources()) != 5 {
		t.Errorf("CDS has %d clusters, want 3 pools + ext_proc + rate limit", len(cds.GetResources()))
	}
	d.subscribe(resource.EndpointType, pools)
	if got := len(d.recvType(resource.EndpointType).GetResources()); got != 3 {
		t.Fatalf("initial EDS: %d assignments, want 3", got)
	}

	var lat []time.Duration
	for i, ok := range []bool{false, true, false, true, false, true} {
		sent := health.set("a", ok)
		r, err := d.recv()
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(sent))
		if r.GetTypeUrl() != resource.EndpointType {
			t.Fatalf("round %d: health change pushed %s, want only EDS", i, r.GetTypeUrl())
		}
		var names []string
		for _, res := range r.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := res.GetResource().UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			names = append(names, cla.GetClusterName())
			for _, loc := range cla.GetEndpoints() {
				if loc.GetLocality().GetZone() != "a" {
					continue
				}
				// An unhealthy backend keeps its locality, with no endpoints.
				eps := loc.GetLbEndpoints()
				switch {
				case !ok && len(eps) != 0:
					t.Errorf("round %d: %s backend a without usable keys still has endpoints %v", i, cla.GetClusterName(), eps)
				case ok && (len(eps) == 0 || eps[0].GetHealthStatus() != corev3.HealthStatus_HEALTHY):
					t.Errorf("round %d: %s backend a with keys: endpoints %v, want one HEALTHY", i, cla.GetClusterName(), eps)
				}
			}
		}
		sort.Strings(names)
		if !slices.Equal(names, []string{"pool_m1", "pool_m3"}) {
			t.Errorf("round %d: delta carried %v, want only the pools using backend a", i, names)
		}
	}
	slices.Sort(lat)
	t.Logf("health signal -> EDS delta received: min %v median %v max %v (n=%d)", lat[0], lat[len(lat)/2], lat[len(lat)-1], len(lat))
}

// TestSotWAndNodeGroups: a SotW client of each node group gets its own
// resource type; an unknown node cluster gets the gateway (existing mesh).
func TestSotWAndNodeGroups(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(map[string][]string{"m": {"a@127.0.0.1:9001,1,0"}})+`
tenants:
  - name: t1
    keys: [{id: k, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}]
    models: ["*"]
    limits: {rpm: 7}
`)
	cp := New(Options{})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	cc := dial(t, startControlPlane(t, cp))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fetch := func(node *corev3.Node, typeURL string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.CloseSend()
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("%s for %v: %v", typeURL, node, err)
		}
		return r
	}
	rl := fetch(&corev3.Node{Id: contract.NodeRateLimit}, resource.RateLimitConfigType)
	var rlc rlsconf.RateLimitConfig
	if len(rl.GetResources()) != 1 || rl.GetResources()[0].UnmarshalTo(&rlc) != nil || rlc.GetDomain() != "swarmgate" {
		t.Fatalf("rate-limit node got %v", rl)
	}
	if got := rlc.GetDescriptors()[0].GetDescriptors()[0].GetRateLimit().GetRequestsPerUnit(); got != 7 {
		t.Errorf("tenant rpm = %d, want 7", got)
	}
	for _, node := range []*corev3.Node{envoyNode("e1"), {Id: "mesh-envoy", Cluster: "their-mesh"}} {
		l := fetch(node, resource.ListenerType)
		if len(l.GetResources()) != 1 {
			t.Errorf("node %v: %d listeners", node, len(l.GetResources()))
		}
		v1 := l.GetVersionInfo()
		l2 := fetch(node, resource.ListenerType)
		if l2.GetVersionInfo() != v1 {
			t.Error("same config, different version")
		}
	}
	// Same config set again: same versions (deterministic hashes).
	before := fmt.Sprint(cp.Versions())
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(map[string][]string{"m": {"a@127.0.0.1:9001,1,0"}})+`
tenants:
  - name: t1
    keys: [{id: k, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}]
    models: ["*"]
    limits: {rpm: 7}
`)); err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprint(cp.Versions()); after != before {
		t.Errorf("re-parsed identical config changed versions:\n%s\n%s", before, after)
	}
}

func TestRunWithoutConfig(t *testing.T) {
	if err := New(Options{}).Run(context.Background(), nil); err != ErrNoConfig {
		t.Fatalf("Run before SetConfig = %v, want ErrNoConfig", err)
	}
}

// TestIncrementalEndpointsMatchFull: the EDS update that re-encodes only the
// pools of changed backends has the same versions as a full recomputation.
func TestIncrementalEndpointsMatchFull(t *testing.T) {
	cp := New(Options{})
	if err := cp.SetConfig(parseConfig(t, scaleYAML(8, ""))); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		unhealthy map[string]bool
		capacity  map[string]contract.Capacity
	}{
		{map[string]bool{"b3-0": true}, nil},
		{map[string]bool{"b3-0": true, "b7-1": true}, nil},
		{map[string]bool{"b7-1": true}, map[string]contract.Capacity{"b3-0": {Attempts: 600}, "b3-1": {Attempts: 300}}},
		{map[string]bool{}, map[string]contract.Capacity{"b3-0": {Attempts: 620}, "b3-1": {Attempts: 300}}}, // within capacityStep: kept
		{map[string]bool{}, map[string]contract.Capacity{"b3-0": {Attempts: 600, Refused: 300}, "b3-1": {Attempts: 300}}},
		{map[string]bool{}, nil},
	} {
		unhealthy := st.unhealthy
		cp.setHealth(unhealthy, st.capacity, true)
		cp.mu.Lock()
		got := cp.snaps[cp.envoyGroup].types[resource.EndpointType]
		full, err := newTypeResources(asResources(translator.Endpoints(cp.res.IR, cp.state)))
		cp.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if got.version != full.version || !maps.Equal(got.versions, full.versions) {
			t.Fatalf("unhealthy %v: incremental EDS version %s, full %s", unhealthy, got.version, full.version)
		}
	}
}

// TestDeltaEDSCapacityWeights: when the key pools learn the backends'
// capacity, the pools' locality weights follow it in an EDS-only delta; a
// move within capacityStep pushes nothing.
func TestDeltaEDSCapacityWeights(t *testing.T) {
	health := newTestHealth()
	cfg := parseConfig(t, gatewayYAML(map[string][]string{
		"m1": {"a@127.0.0.1:9001,1,0", "b@127.0.0.1:9002,1,0"},
	}))
	cp := New(Options{Health: health, CapacityEvery: 10 * time.Millisecond})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := newDeltaClient(t, ctx, dial(t, startControlPlane(t, cp)), envoyNode("envoy-1"))
	d.recvType(resource.ClusterType)
	d.subscribe(resource.EndpointType, []string{"pool_m1"})
	weights := func(r *discoveryv3.DeltaDiscoveryResponse) map[string]uint32 {
		t.Helper()
		out := map[string]uint32{}
		for _, res := range r.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := res.GetResource().UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, loc := range cla.GetEndpoints() {
				out[loc.GetLocality().GetZone()] = loc.GetLoadBalancingWeight().GetValue()
			}
		}
		return out
	}
	if w := weights(d.recvType(resource.EndpointType)); w["a"] != 1 || w["b"] != 1 {
		t.Fatalf("initial weights %v, want the configured 1 and 1", w)
	}
	health.setCapacity("a", contract.Capacity{Attempts: 330})
	health.setCapacity("b", contract.Capacity{Attempts: 210})
	var w map[string]uint32
	for w["a"] != 611 {
		r, err := d.recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTypeUrl() != resource.EndpointType {
			t.Fatalf("capacity change pushed %s, want only EDS", r.GetTypeUrl())
		}
		w = weights(r)
		if len(w) == 2 && w["a"]+w["b"] != 2 && w["a"]+w["b"] != 1000 {
			t.Fatalf("weights %v, want them to follow 330:210", w)
		}
	}
	if w["b"] != 389 {
		t.Fatalf("weights %v, want a 611, b 389", w)
	}
	var m dto.Metric
	if err := cp.metrics.capacity.WithLabelValues("b", "attempts").Write(&m); err != nil || m.GetGauge().GetValue() != 210 {
		t.Errorf("capacity gauge for b: %v (%v), want 210", m.GetGauge().GetValue(), err)
	}
	health.setCapacity("a", contract.Capacity{Attempts: 340}) // within capacityStep
	got := make(chan *discoveryv3.DeltaDiscoveryResponse, 1)
	go func() {
		if r, err := d.recv(); err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Fatalf("a 3 %% move pushed %v", weights(r))
	case <-time.After(300 * time.Millisecond):
	}
}
