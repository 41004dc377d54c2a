package loadgen

import (
	"fmt"
	"path/filepath"

	"google.golang.org/grpc/credentials"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

// Identities of the TLS-cost measurement: the server's and the load
// generator's, which plays Envoy (the one identity allowed).
const (
	benchServerID = "spiffe://swarmgate.bench/sa/extproc"
	benchEnvoyID  = "spiffe://swarmgate.bench/sa/envoy"
)

// panicTB lets trusttest write certificates outside a test.
type panicTB struct{}

func (panicTB) Helper()           {}
func (panicTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// WriteTLS writes a CA and the server's and client's certificates to dir
// and returns the client's credentials (mutual TLS, server identity
// checked), as Envoy connects with security.envoy.
func WriteTLS(dir string) (c credentials.TransportCredentials, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("loadgen: writing certificates: %v", r)
		}
	}()
	ca := trusttest.NewCA(panicTB{}, dir, "bench")
	ca.Issue(panicTB{}, dir, "server", benchServerID)
	cl := ca.Issue(panicTB{}, dir, "client", benchEnvoyID)
	return trust.ClientCredentials(trust.ClientPolicy{Files: trust.Files{Cert: cl.CertFile, Key: cl.KeyFile, CA: ca.CAFile}, ServerIdentity: benchServerID})
}

// ServerTLS is the listener side of WriteTLS's files: mutual TLS with the
// client identity allow-list and the ext_proc stream proof, as `swarmgate
// serve` builds them from security.extproc.
func ServerTLS(dir string) (credentials.TransportCredentials, extproc.StreamProof, error) {
	ids := []string{benchEnvoyID}
	c, err := trust.ServerCredentials(trust.ServerPolicy{Files: trust.Files{
		Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key"), CA: filepath.Join(dir, "bench-ca.crt")},
		AllowedIdentities: ids})
	if err != nil {
		return nil, nil, err
	}
	return c, &trust.FleetProof{Identities: ids}, nil
}
