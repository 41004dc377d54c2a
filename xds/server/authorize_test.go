package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
	"github.com/swarmgate/swarmgate/xds/gatewayconfig"
)

const (
	idXDS     = "spiffe://swarmgate.test/sa/xds"
	idEnvoy   = "spiffe://swarmgate.test/sa/envoy"
	idExtProc = "spiffe://swarmgate.test/sa/extproc"
	idWorker  = "spiffe://swarmgate.test/sa/worker"
)

// TestNodeGroupsOverMutualTLS: over real mutual TLS, a client subscribes
// only as the node groups its certificate identity is granted; the
// GatewayConfig (virtual-key hashes) reaches ext_proc replicas only.
func TestNodeGroupsOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	srv := ca.Issue(t, dir, "xds", idXDS)
	leaves := map[string]trusttest.Leaf{
		idEnvoy: ca.Issue(t, dir, "envoy", idEnvoy), idExtProc: ca.Issue(t, dir, "extproc", idExtProc),
		idWorker: ca.Issue(t, dir, "worker", idWorker),
	}
	creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	cp := New(Options{ServerOptions: []grpc.ServerOption{grpc.Creds(creds)}, NodeGroups: []config.NodeGroupGrant{
		{Identity: idEnvoy, Groups: []string{config.GroupEnvoy}},
		{Identity: idExtProc, Groups: []string{config.GroupExtProc, config.GroupRateLimit}},
	}})
	cfg := parseConfig(t, gatewayYAML(map[string][]string{"m": {"a@127.0.0.1:1,1,0"}}))
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	addr := startControlPlane(t, cp)

	dial := func(t *testing.T, id string) *grpc.ClientConn {
		p := trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: idXDS}
		if l, ok := leaves[id]; ok {
			p.Cert, p.Key = l.CertFile, l.KeyFile
		}
		c, err := trust.ClientCredentials(p)
		if err != nil {
			t.Fatal(err)
		}
		return dialWith(t, addr, c)
	}
	tests := []struct {
		name, id string
		node     *corev3.Node
		typeURL  string
		delta    bool
		want     codes.Code
	}{
		{"envoy as the gateway group", idEnvoy, &corev3.Node{Id: "e1", Cluster: cfg.Envoy.NodeCluster}, resource.ClusterType, false, codes.OK},
		{"envoy of an existing mesh (own node cluster)", idEnvoy, &corev3.Node{Id: "e2", Cluster: "mesh-gw"}, resource.ClusterType, false, codes.OK},
		{"envoy over delta", idEnvoy, &corev3.Node{Id: "e3", Cluster: cfg.Envoy.NodeCluster}, resource.ClusterType, true, codes.OK},
		{"envoy claiming the ext_proc group", idEnvoy, &corev3.Node{Id: "e4", Cluster: contract.NodeExtProc}, gatewayconfig.TypeURL, false, codes.PermissionDenied},
		{"envoy claiming the ext_proc group by node id", idEnvoy, &corev3.Node{Id: contract.NodeExtProc}, gatewayconfig.TypeURL, true, codes.PermissionDenied},
		{"ext_proc replica", idExtProc, &corev3.Node{Id: "r1", Cluster: contract.NodeExtProc}, gatewayconfig.TypeURL, false, codes.OK},
		{"rate-limit service", idExtProc, &corev3.Node{Id: contract.NodeRateLimit, Cluster: contract.NodeRateLimit}, resource.RateLimitConfigType, false, codes.OK},
		{"ext_proc identity as Envoy", idExtProc, &corev3.Node{Id: "r2", Cluster: cfg.Envoy.NodeCluster}, resource.ClusterType, false, codes.PermissionDenied},
		{"identity without a grant", idWorker, &corev3.Node{Id: "w", Cluster: contract.NodeExtProc}, gatewayconfig.TypeURL, false, codes.PermissionDenied},
		{"no client certificate", "", &corev3.Node{Id: "anon", Cluster: contract.NodeExtProc}, gatewayconfig.TypeURL, false, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(t, tt.id)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
			var n int
			var err error
			if tt.delta {
				n, err = deltaOnce(ctx, ads, tt.node, tt.typeURL)
			} else {
				n, err = sotwOnce(ctx, ads, tt.node, tt.typeURL)
			}
			if status.Code(err) != tt.want {
				t.Fatalf("got %v (%d resources), want %v", err, n, tt.want)
			}
			if tt.want == codes.OK && n == 0 {
				t.Fatal("no resources")
			}
		})
	}
}

func dialWith(t *testing.T, addr string, c credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func sotwOnce(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node, typeURL string) (int, error) {
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
		_, err = st.Recv()
		return 0, err
	}
	resp, err := st.Recv()
	return len(resp.GetResources()), err
}

func deltaOnce(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node, typeURL string) (int, error) {
	st, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
		_, err = st.Recv()
		return 0, err
	}
	resp, err := st.Recv()
	return len(resp.GetResources()), err
}

// TestNodeGroupsFollowReload: over real mutual TLS, SetNodeGroups (a
// config reload) lets an identity it grants subscribe and refuses one it
// no longer grants, including on a stream already open: that stream gets
// no further response and is refused at its next request or push.
func TestNodeGroupsFollowReload(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	srv := ca.Issue(t, dir, "xds", idXDS)
	worker := ca.Issue(t, dir, "worker", idWorker)
	creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	envoyOnly := []config.NodeGroupGrant{{Identity: idEnvoy, Groups: []string{config.GroupEnvoy}}}
	withWorker := append(slices.Clone(envoyOnly), config.NodeGroupGrant{Identity: idWorker, Groups: []string{config.GroupExtProc}})
	cp := New(Options{ServerOptions: []grpc.ServerOption{grpc.Creds(creds)}, NodeGroups: envoyOnly})
	version := 0
	push := func(t *testing.T) {
		t.Helper()
		version++ // a new model: a new GatewayConfig for the ext_proc group
		if err := cp.SetConfig(parseConfig(t, gatewayYAML(map[string][]string{fmt.Sprintf("m%d", version): {"a@127.0.0.1:1,1,0"}}))); err != nil {
			t.Fatal(err)
		}
	}
	push(t)
	addr := startControlPlane(t, cp)
	c, err := trust.ClientCredentials(trust.ClientPolicy{Files: trust.Files{Cert: worker.CertFile, Key: worker.KeyFile, CA: ca.CAFile}, ServerIdentity: idXDS})
	if err != nil {
		t.Fatal(err)
	}
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(dialWith(t, addr, c))
	node := &corev3.Node{Id: "r1", Cluster: contract.NodeExtProc}

	t.Run("new streams", func(t *testing.T) {
		for _, step := range []struct {
			name   string
			grants []config.NodeGroupGrant
			want   codes.Code
		}{
			{"no grant", envoyOnly, codes.PermissionDenied},
			{"reload grants it", withWorker, codes.OK},
			{"reload removes it", envoyOnly, codes.PermissionDenied},
			{"reload removes every grant: anyone", nil, codes.OK},
		} {
			cp.SetNodeGroups(step.grants)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := sotwOnce(ctx, ads, node, gatewayconfig.TypeURL)
			cancel()
			if status.Code(err) != step.want {
				t.Errorf("%s: got %v, want %v", step.name, err, step.want)
			}
		}
	})

	// next is what follows the revocation on the open stream: the client's
	// ACK, or the control plane's next push.
	for _, tt := range []struct {
		name  string
		delta bool
		next  string
	}{
		{"sotw, ack", false, "ack"},
		{"sotw, push", false, "push"},
		{"delta, ack", true, "ack"},
		{"delta, push", true, "push"},
	} {
		t.Run("open stream: "+tt.name, func(t *testing.T) {
			cp.SetNodeGroups(withWorker)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var ack func() error
			var recv func() (int, error)
			if tt.delta {
				st, err := ads.DeltaAggregatedResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				recv = func() (int, error) { r, err := st.Recv(); return len(r.GetResources()), err }
				if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: gatewayconfig.TypeURL}); err != nil {
					t.Fatal(err)
				}
				ack = func() error {
					return st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: gatewayconfig.TypeURL, ResponseNonce: "1"})
				}
			} else {
				st, err := ads.StreamAggregatedResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var last *discoveryv3.DiscoveryResponse
				recv = func() (int, error) { r, err := st.Recv(); last = r; return len(r.GetResources()), err }
				if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: gatewayconfig.TypeURL}); err != nil {
					t.Fatal(err)
				}
				ack = func() error {
					return st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: gatewayconfig.TypeURL, VersionInfo: last.GetVersionInfo(), ResponseNonce: last.GetNonce()})
				}
			}
			if n, err := recv(); err != nil || n == 0 {
				t.Fatalf("granted: %d resources, %v", n, err)
			}

			if tt.next == "push" {
				// Acknowledged while granted: the stream waits for the
				// next version, which the push below would send.
				if err := ack(); err != nil {
					t.Fatal(err)
				}
				waitWatch(t, cp, tt.delta)
			}
			cp.SetNodeGroups(envoyOnly)
			switch tt.next {
			case "ack":
				if err := ack(); err != nil {
					t.Fatal(err)
				}
			case "push":
				push(t)
			}
			if n, err := recv(); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("after the grant was removed: %d resources, %v; want PermissionDenied", n, err)
			}
		})
	}
}

// waitWatch waits until the ext_proc group's one stream has a watch open
// in the cache (its acknowledgement was processed).
func waitWatch(t *testing.T, cp *ControlPlane, delta bool) {
	t.Helper()
	watches := func() int {
		info := cp.cache.GetStatusInfo(contract.NodeExtProc)
		switch {
		case info == nil:
			return 0
		case delta:
			return info.GetNumDeltaWatches()
		}
		return info.GetNumWatches()
	}
	for deadline := time.Now().Add(10 * time.Second); watches() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream's acknowledgement opened no watch")
		}
	}
}
