package server

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// TestCacheKeySurvivesRename: a node's cache key does not depend on what
// envoy.node_cluster is called, so a rename leaves its watches where the
// new snapshot is set; ID still names the group (the authorizer logs it).
func TestCacheKeySurvivesRename(t *testing.T) {
	g := &nodeGroup{grpc: "grpc-clients"}
	for _, tc := range []struct {
		name      string
		node      *corev3.Node
		key       string
		idBefore  string // ID with the Envoy group "swarmgate"
		idRenamed string // ID with the Envoy group "gw2"
	}{
		{"gateway under the old name", &corev3.Node{Id: "e1", Cluster: "swarmgate"}, envoyCacheKey, "swarmgate", "gw2"},
		{"gateway under the new name", &corev3.Node{Id: "e2", Cluster: "gw2"}, envoyCacheKey, "swarmgate", "gw2"},
		{"existing mesh", &corev3.Node{Id: "mesh", Cluster: "their-mesh"}, envoyCacheKey, "swarmgate", "gw2"},
		{"no node", &corev3.Node{}, envoyCacheKey, "swarmgate", "gw2"},
		{"rate limit by id", &corev3.Node{Id: contract.NodeRateLimit}, contract.NodeRateLimit, contract.NodeRateLimit, contract.NodeRateLimit},
		{"ext_proc by cluster", &corev3.Node{Id: "r1", Cluster: contract.NodeExtProc}, contract.NodeExtProc, contract.NodeExtProc, contract.NodeExtProc},
		{"proxyless gRPC", &corev3.Node{Id: "c1", Cluster: "grpc-clients"}, "grpc-clients", "grpc-clients", "grpc-clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []struct{ envoy, id string }{{"swarmgate", tc.idBefore}, {"gw2", tc.idRenamed}} {
				g.envoy.Store(&step.envoy)
				if got := (cacheHash{g}).ID(tc.node); got != tc.key {
					t.Errorf("Envoy group %q: cache key %q, want %q", step.envoy, got, tc.key)
				}
				if got := g.ID(tc.node); got != step.id {
					t.Errorf("Envoy group %q: group %q, want %q", step.envoy, got, step.id)
				}
			}
		})
	}
}

// TestRenameKeepsConnectedEnvoys: Envoys subscribed (and ACKed) before
// envoy.node_cluster is renamed, as the old group or as an existing mesh
// falling back to it, over SotW and Delta, get the rename's push and every
// later one; a node connecting under the new name gets the same resources.
func TestRenameKeepsConnectedEnvoys(t *testing.T) {
	models := map[string][]string{"m1": {"a@127.0.0.1:9001,1,0"}}
	cp := New(Options{})
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(models))); err != nil {
		t.Fatal(err)
	}
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(dial(t, startControlPlane(t, cp)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type subscriber struct {
		name  string
		delta bool // counts only the clusters a push adds
		next  func() (int, bool)
	}
	var subs []subscriber
	for _, node := range []*corev3.Node{{Id: "e1", Cluster: "swarmgate"}, {Id: "mesh-1", Cluster: "their-mesh"}} {
		subs = append(subs,
			subscriber{"SotW " + node.GetCluster(), false, sotwCDS(t, ctx, ads, node)},
			subscriber{"Delta " + node.GetCluster(), true, deltaCDS(t, ctx, ads, node)})
	}
	for _, s := range subs {
		if n, ok := s.next(); !ok || n != 3 {
			t.Fatalf("%s: initial CDS %d clusters (received %v), want 3", s.name, n, ok)
		}
	}

	for i, edit := range []struct {
		group, model string
		clusters     int
	}{
		{"gw2", "m2", 4},
		{"gw2", "m3", 5},
		{"swarmgate", "m4", 6},
	} {
		models[edit.model] = []string{"a@127.0.0.1:9001,1,0"}
		waitWatches(t, cp, len(subs))
		if err := cp.SetConfig(parseConfig(t, gatewayYAML(models)+"envoy: {node_cluster: "+edit.group+"}\n")); err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			want := edit.clusters
			if s.delta {
				want = 1
			}
			if n, ok := s.next(); !ok {
				t.Errorf("edit %d (group %s): %s got no CDS push within 3s", i, edit.group, s.name)
			} else if n != want {
				t.Errorf("edit %d (group %s): %s got %d clusters, want %d", i, edit.group, s.name, n, want)
			}
		}
		if t.Failed() {
			t.FailNow() // a subscriber whose Recv timed out cannot go on
		}
		if n, ok := fetchCDS(t, ctx, ads, &corev3.Node{Id: "e-new", Cluster: edit.group}); !ok || n != edit.clusters {
			t.Errorf("edit %d: a node connecting as %s got %d clusters (received %v), want %d", i, edit.group, n, ok, edit.clusters)
		}
	}
}

// waitWatches waits until the cache holds n open watches: the subscribers'
// ACKs have been taken and they wait for the next change.
func waitWatches(t *testing.T, cp *ControlPlane, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		open := 0
		for _, key := range cp.cache.GetStatusKeys() {
			if info := cp.cache.GetStatusInfo(key); info != nil {
				open += info.GetNumWatches() + info.GetNumDeltaWatches()
			}
		}
		if open == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches open, want %d", open, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recvWithin runs recv, giving up after 3 s (the Recv then stays blocked
// until the stream ends).
func recvWithin[T any](recv func() (T, error)) (T, bool) {
	type result struct {
		r   T
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := recv(); ch <- result{r, err} }()
	select {
	case res := <-ch:
		return res.r, res.err == nil
	case <-time.After(3 * time.Second):
		var zero T
		return zero, false
	}
}

// sotwCDS subscribes node to CDS over a SotW ADS stream; each call returns
// the cluster count of the next response, which it ACKs.
func sotwCDS(t *testing.T, ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node) func() (int, bool) {
	t.Helper()
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	return func() (int, bool) {
		r, ok := recvWithin(st.Recv)
		if !ok {
			return 0, false
		}
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
		return len(r.GetResources()), st.Send(ack) == nil
	}
}

// fetchCDS returns the cluster count of node's first CDS response over a
// SotW stream it then closes (no ACK: it opens no watch).
func fetchCDS(t *testing.T, ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node) (int, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, ok := recvWithin(st.Recv)
	return len(r.GetResources()), ok
}

// deltaCDS is sotwCDS over a Delta stream (counting the clusters added or
// changed).
func deltaCDS(t *testing.T, ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node) func() (int, bool) {
	t.Helper()
	st, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	return func() (int, bool) {
		r, ok := recvWithin(st.Recv)
		if !ok {
			return 0, false
		}
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()}
		return len(r.GetResources()), st.Send(ack) == nil
	}
}
