package trust_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

const (
	envoyID  = "spiffe://swarmgate.test/ns/swarmgate/sa/envoy"
	serverID = "spiffe://swarmgate.test/ns/swarmgate/sa/extproc"
	otherID  = "spiffe://swarmgate.test/ns/agents/sa/worker"
)

// serve starts a gRPC health server with creds on 127.0.0.1:0.
func serve(t *testing.T, creds credentials.TransportCredentials, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(opts, grpc.Creds(creds))...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func check(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func clientCreds(t *testing.T, p trust.ClientPolicy) credentials.TransportCredentials {
	t.Helper()
	c, err := trust.ClientCredentials(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	rogue := trusttest.NewCA(t, dir, "rogue")
	srv := ca.Issue(t, dir, "server", serverID, "extproc.swarmgate.svc")
	envoy := ca.Issue(t, dir, "envoy", envoyID)
	worker := ca.Issue(t, dir, "worker", otherID)
	forged := rogue.Issue(t, dir, "forged", envoyID)

	creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile},
		AllowedIdentities: []string{envoyID}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, creds)
	tests := []struct {
		name   string
		client trust.ClientPolicy
		ok     bool
	}{
		{"allowed identity", trust.ClientPolicy{Files: trust.Files{Cert: envoy.CertFile, Key: envoy.KeyFile, CA: ca.CAFile}, ServerIdentity: serverID}, true},
		{"allowed identity, DNS server check", trust.ClientPolicy{Files: trust.Files{Cert: envoy.CertFile, Key: envoy.KeyFile, CA: ca.CAFile}, ServerIdentity: "extproc.swarmgate.svc"}, true},
		{"no client certificate", trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: serverID}, false},
		{"identity not allowed", trust.ClientPolicy{Files: trust.Files{Cert: worker.CertFile, Key: worker.KeyFile, CA: ca.CAFile}, ServerIdentity: serverID}, false},
		{"certificate of another CA", trust.ClientPolicy{Files: trust.Files{Cert: forged.CertFile, Key: forged.KeyFile, CA: ca.CAFile}, ServerIdentity: serverID}, false},
		{"server identity mismatch", trust.ClientPolicy{Files: trust.Files{Cert: envoy.CertFile, Key: envoy.KeyFile, CA: ca.CAFile}, ServerIdentity: otherID}, false},
		{"server of an untrusted CA", trust.ClientPolicy{Files: trust.Files{Cert: envoy.CertFile, Key: envoy.KeyFile, CA: rogue.CAFile}, ServerIdentity: serverID}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(t, addr, clientCreds(t, tt.client))
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && status.Code(err) != codes.Unavailable {
				t.Fatalf("got %v, want the connection refused (Unavailable)", err)
			}
		})
	}
	t.Run("plaintext client", func(t *testing.T) {
		if err := check(t, addr, insecureCreds()); status.Code(err) != codes.Unavailable {
			t.Fatalf("plaintext client: %v", err)
		}
	})
}

func TestRotatedCertificateIsServed(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	// The server's files are rewritten in place, as a Kubernetes secret
	// volume or cert-manager would.
	ca.Issue(t, dir, "server", serverID)
	creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: dir + "/server.crt", Key: dir + "/server.key"},
		ReloadInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, creds)
	const rotatedID = "spiffe://swarmgate.test/ns/swarmgate/sa/extproc-rotated"
	if err := check(t, addr, clientCreds(t, trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: serverID})); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	ca.Issue(t, dir, "server", rotatedID)
	time.Sleep(5 * time.Millisecond) // past the reload interval
	if err := check(t, addr, clientCreds(t, trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: rotatedID})); err != nil {
		t.Fatalf("after rotation the new certificate is not served: %v", err)
	}
	// A broken rotation (garbage in the key file) keeps the last good one.
	if err := writeFile(dir+"/server.key", "not a key"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := check(t, addr, clientCreds(t, trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}, ServerIdentity: rotatedID})); err != nil {
		t.Fatalf("a broken rotation stopped the listener: %v", err)
	}
}

func TestFleetProof(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	srv := ca.Issue(t, dir, "server", serverID)
	envoy := ca.Issue(t, dir, "envoy", envoyID)
	worker := ca.Issue(t, dir, "worker", otherID)
	const secret = "fleet-secret-0123456789abcdef"

	for _, tt := range []struct {
		name   string
		proof  trust.FleetProof
		mutual bool
		client trusttest.Leaf
		md     string
		want   codes.Code
	}{
		{name: "nothing configured", want: codes.OK},
		{name: "secret matches", proof: trust.FleetProof{Secrets: []string{secret}}, md: secret, want: codes.OK},
		{name: "secret missing", proof: trust.FleetProof{Secrets: []string{secret}}, want: codes.Unauthenticated},
		{name: "secret wrong", proof: trust.FleetProof{Secrets: []string{secret}}, md: secret[:len(secret)-1] + "X", want: codes.Unauthenticated},
		{name: "secret prefix", proof: trust.FleetProof{Secrets: []string{secret}}, md: secret[:8], want: codes.Unauthenticated},
		{name: "identity allowed", proof: trust.FleetProof{Identities: []string{envoyID}}, mutual: true, client: envoy, want: codes.OK},
		{name: "identity not allowed", proof: trust.FleetProof{Identities: []string{envoyID}}, mutual: true, client: worker, want: codes.PermissionDenied},
		{name: "identity not allowed, secret given", proof: trust.FleetProof{Identities: []string{envoyID}, Secrets: []string{"old-secret-0123456789", secret}}, mutual: true, client: worker, md: secret, want: codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var creds credentials.TransportCredentials = insecureCreds()
			if tt.mutual {
				c, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile}})
				if err != nil {
					t.Fatal(err)
				}
				creds = c
			}
			proof := tt.proof
			addr := serve(t, creds, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := proof.Check(ctx, "test"); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}))
			cc := insecureCreds()
			if tt.mutual {
				cc = clientCreds(t, trust.ClientPolicy{Files: trust.Files{Cert: tt.client.CertFile, Key: tt.client.KeyFile, CA: ca.CAFile}, ServerIdentity: serverID})
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(cc))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tt.md != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, contract.GRPCFleetSecretHeader, tt.md)
			}
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tt.want {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatal("the error echoes the secret")
			}
		})
	}
}

func TestClientChecksHostNameWithoutServerIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	for _, tt := range []struct {
		san string
		ok  bool
	}{{"127.0.0.1", true}, {"elsewhere.example", false}} {
		srv := ca.Issue(t, dir, "server-"+tt.san, tt.san)
		creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile}})
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, creds)
		err = check(t, addr, clientCreds(t, trust.ClientPolicy{Files: trust.Files{CA: ca.CAFile}}))
		if (err == nil) != tt.ok {
			t.Errorf("server certificate for %s dialled as %s: %v", tt.san, addr, err)
		}
	}
}
