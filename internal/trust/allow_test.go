package trust_test

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

// TestAllowListFollowsSet: over real mutual TLS, a changed allow-list
// admits an identity it adds at the next handshake and refuses one it
// removes, and closes the connection that identity already had; the
// connections of identities still allowed stay up.
func TestAllowListFollowsSet(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	srv := ca.Issue(t, dir, "server", serverID)
	leaves := map[string]trusttest.Leaf{envoyID: ca.Issue(t, dir, "envoy", envoyID), otherID: ca.Issue(t, dir, "worker", otherID)}
	allowed := trust.NewAllowList([]string{envoyID}, nil)
	creds, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile}, Allowed: allowed})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, creds)
	creds2 := func(id string) trust.ClientPolicy {
		return trust.ClientPolicy{Files: trust.Files{Cert: leaves[id].CertFile, Key: leaves[id].KeyFile, CA: ca.CAFile}, ServerIdentity: serverID}
	}

	// New connections: each step sets the list, then dials every identity.
	for _, step := range []struct {
		name    string
		set     []string
		allowed map[string]bool
	}{
		{"as started", []string{envoyID}, map[string]bool{envoyID: true, otherID: false}},
		{"identity added", []string{envoyID, otherID}, map[string]bool{envoyID: true, otherID: true}},
		{"identity removed", []string{envoyID}, map[string]bool{envoyID: true, otherID: false}},
		{"list emptied: any certificate of the CA", nil, map[string]bool{envoyID: true, otherID: true}},
	} {
		t.Run(step.name, func(t *testing.T) {
			allowed.Set(step.set)
			for id, ok := range step.allowed {
				err := check(t, addr, clientCreds(t, creds2(id)))
				if ok && err != nil {
					t.Errorf("%s refused: %v", id, err)
				}
				if !ok && status.Code(err) != codes.Unavailable {
					t.Errorf("%s: got %v, want the handshake refused (Unavailable)", id, err)
				}
			}
		})
	}

	// Open connections: each case opens a stream per identity, then
	// changes the policy; otherID's connection must close, envoyID's stay.
	for _, tt := range []struct {
		name   string
		change func()
		// refused: otherID's next connection is refused too.
		refused bool
	}{
		{"identity removed", func() { allowed.Set([]string{envoyID}) }, true},
		{"CloseUnless rejects it", func() {
			allowed.CloseUnless(func(c *x509.Certificate) bool { return !trust.Matches(c, otherID) }, "test")
		}, false},
	} {
		t.Run("open connections, "+tt.name, func(t *testing.T) {
			allowed.Set([]string{envoyID, otherID})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kept, _ := watchHealth(t, ctx, addr, clientCreds(t, creds2(envoyID)))
			_, cut := watchHealth(t, ctx, addr, clientCreds(t, creds2(otherID)))

			tt.change()
			if _, err := cut.Recv(); status.Code(err) != codes.Unavailable {
				t.Fatalf("stream of the rejected identity: got %v, want its connection closed (Unavailable)", err)
			}
			if _, err := healthpb.NewHealthClient(kept).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("identity still allowed: %v", err)
			}
			if s := kept.GetState(); s != connectivity.Ready {
				t.Fatalf("connection of the identity still allowed: %v, want it kept (Ready)", s)
			}
			if err := check(t, addr, clientCreds(t, creds2(otherID))); (status.Code(err) == codes.Unavailable) != tt.refused {
				t.Fatalf("reconnection of the rejected identity: %v, refused=%v wanted", err, tt.refused)
			}
		})
	}
}

// watchHealth opens a health Watch stream on a new connection and reads
// its first answer.
func watchHealth(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, healthpb.Health_WatchClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	return conn, w
}
