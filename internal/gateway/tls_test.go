package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
	"github.com/swarmgate/swarmgate/xds/gatewayconfig"
)

const (
	idSwarmgate = "spiffe://swarmgate.test/ns/swarmgate/sa/swarmgate"
	idEnvoy     = "spiffe://swarmgate.test/ns/swarmgate/sa/envoy"
	idWorker    = "spiffe://swarmgate.test/ns/agents/sa/worker"
)

const securityYAML = `security:
  tls: {cert_file: %[1]s, key_file: %[2]s, client_ca_file: %[3]s}
  xds:
    allowed_identities: [%[4]s, %[5]s]
    server_identity: %[4]s
    node_groups:
      - {identity: %[5]s, groups: [envoy]}
      - {identity: %[4]s, groups: [extproc, ratelimit]}
  extproc: {allowed_identities: [%[5]s], server_identity: %[4]s}
  ratelimit: {allowed_identities: [%[5]s, %[4]s], server_identity: %[4]s}
`

// TestServeOverMutualTLS runs `swarmgate serve` with mutual TLS on every
// gRPC listener: the embedded rate-limit service gets its config from the
// control plane over mutual TLS (its identity is granted the ratelimit node
// group), ext_proc and the rate-limit service answer the Envoy identity,
// and refuse a client without a certificate and an identity not allowed.
func TestServeOverMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	sg := ca.Issue(t, dir, "swarmgate", idSwarmgate)
	envoy := ca.Issue(t, dir, "envoy", idEnvoy)
	worker := ca.Issue(t, dir, "worker", idWorker)

	xdsL, epL, adminL := listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	yaml := fmt.Sprintf(gatewayYAML, xdsL.Addr(), epL.Addr(), rlsAddr, adminL.Addr(), rs.Addr, "127.0.0.1:9",
		config.HashKey("sk-team"), fmt.Sprintf(securityYAML, sg.CertFile, sg.KeyFile, ca.CAFile, idSwarmgate, idEnvoy))
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop := startServe(t, ctx, path, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})

	creds := func(l *trusttest.Leaf) credentials.TransportCredentials {
		p := trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: idSwarmgate}
		if l != nil {
			p.Cert, p.Key = l.CertFile, l.KeyFile
		}
		c, err := trust.ClientCredentials(p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tt := range []struct {
		name string
		leaf *trusttest.Leaf
		want codes.Code
	}{
		{"envoy identity", &envoy, codes.OK},
		{"no client certificate", nil, codes.Unavailable},
		{"identity not allowed", &worker, codes.Unavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Rate-limit service: answering OK means it also loaded its
			// config from the control plane over mutual TLS.
			conn := dialGRPC(t, rlsAddr, creds(tt.leaf))
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			rlReq := &rlspb.RateLimitRequest{Domain: "swarmgate",
				Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: contract.DescTenant, Value: "team"}, {Key: contract.DescLimit, Value: contract.LimitRPM}}}}}
			_, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(rctx, rlReq, grpc.WaitForReady(tt.want == codes.OK))
			// Ready means listening; the first RateLimitConfig arrives over
			// xDS just after (Unavailable until then).
			for tt.want == codes.OK && status.Code(err) == codes.Unavailable && rctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
				_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(rctx, rlReq, grpc.WaitForReady(true))
			}
			if status.Code(err) != tt.want {
				t.Errorf("rate-limit service: %v, want %v", err, tt.want)
			}

			// ext_proc: the upstream role over a trusted connection is served.
			conn = dialGRPC(t, epL.Addr().String(), creds(tt.leaf))
			sctx := metadata.AppendToOutgoingContext(rctx, contract.GRPCRoleHeader, contract.RoleRouter)
			st, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
			if err == nil {
				_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")},
						{Key: "authorization", RawValue: []byte("Bearer sk-team")}}}, EndOfStream: true}}})
				_, err = st.Recv()
			}
			if status.Code(err) != tt.want {
				t.Errorf("ext_proc: %v, want %v", err, tt.want)
			}
		})
	}

	// xDS: the Envoy identity may not take the ext_proc replicas' group.
	conn := dialGRPC(t, xdsL.Addr().String(), creds(&envoy))
	if _, err := replicaOnce(ctx, conn); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Envoy identity subscribing as an ext_proc replica: %v, want PermissionDenied", err)
	}
	conn = dialGRPC(t, xdsL.Addr().String(), creds(&sg))
	if n, err := replicaOnce(ctx, conn); err != nil || n != 1 {
		t.Errorf("ext_proc identity: %d resources, %v", n, err)
	}

	stop()
}

func dialGRPC(t *testing.T, addr string, c credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// replicaOnce subscribes as an ext_proc replica and returns how many
// GatewayConfig resources the first answer carried.
func replicaOnce(ctx context.Context, conn *grpc.ClientConn) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	node := &corev3.Node{Id: "replica-1", Cluster: contract.NodeExtProc}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: gatewayconfig.TypeURL}); err != nil {
		_, err = st.Recv()
		return 0, err
	}
	resp, err := st.Recv()
	return len(resp.GetResources()), err
}
