package trust

import (
	"fmt"
	"log/slog"

	"google.golang.org/grpc/credentials"

	"github.com/swarmgate/swarmgate/internal/config"
)

// ListenerCredentials are the transport credentials of the named gRPC
// listener (config.ListenerXDS, ListenerExtProc, ListenerRateLimit).
func ListenerCredentials(sec *config.Security, name string, log *slog.Logger) (credentials.TransportCredentials, error) {
	l := sec.Listener(name)
	c, err := ServerCredentials(ServerPolicy{
		Files:             Files{Cert: l.CertFile, Key: l.KeyFile, CA: l.ClientCAFile},
		AllowedIdentities: l.AllowedIdentities, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("security.%s: %w", name, err)
	}
	return c, nil
}

// DialCredentials are what swarmgate's own processes use to dial the named
// listener of another swarmgate process: security.tls's certificate and CA,
// the listener's server_identity.
func DialCredentials(sec *config.Security, name string, log *slog.Logger) (credentials.TransportCredentials, error) {
	cert, key, ca, _ := sec.ClientTLS()
	c, err := ClientCredentials(ClientPolicy{
		Files:          Files{Cert: cert, Key: key, CA: ca},
		ServerIdentity: sec.Listener(name).ServerIdentity, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("security.tls (dialling %s): %w", name, err)
	}
	return c, nil
}

// ExtProcProof is the fleet proof ext_proc streams must carry: the
// identities of security.extproc.allowed_identities under mutual TLS, or
// security.fleet_secret (or, during a rotation, previous_fleet_secret).
func ExtProcProof(sec *config.Security, log *slog.Logger) *FleetProof {
	p := &FleetProof{Logger: log}
	for _, s := range []config.Secret{sec.FleetSecret, sec.PreviousFleetSecret} {
		if v := s.Value(); v != "" {
			p.Secrets = append(p.Secrets, v)
		}
	}
	if l := sec.Listener(config.ListenerExtProc); l.Mutual() {
		p.Identities = l.AllowedIdentities
	}
	return p
}
