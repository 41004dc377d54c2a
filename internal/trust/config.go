package trust

import (
	"crypto/x509"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/credentials"

	"github.com/swarmgate/swarmgate/internal/config"
)

// ListenerCredentials are the transport credentials of the named gRPC
// listener (config.ListenerXDS, ListenerExtProc, ListenerRateLimit), with
// the allowed identities of sec for good.
func ListenerCredentials(sec *config.Security, name string, log *slog.Logger) (credentials.TransportCredentials, error) {
	l, err := NewListener(sec, name, log)
	if err != nil {
		return nil, err
	}
	return l.Credentials, nil
}

// Listener is a gRPC listener's transport security that follows config
// reloads: the certificate, key and CA files are those of the config it
// was built from (re-read when they change), the allowed identities those
// of the last config given to SetConfig.
type Listener struct {
	Credentials credentials.TransportCredentials
	name        string
	allowed     *AllowList
}

// NewListener builds the named listener's security from sec.
func NewListener(sec *config.Security, name string, log *slog.Logger) (*Listener, error) {
	l := sec.Listener(name)
	allowed := NewAllowList(l.AllowedIdentities, log)
	c, err := ServerCredentials(ServerPolicy{
		Files:   Files{Cert: l.CertFile, Key: l.KeyFile, CA: l.ClientCAFile},
		Allowed: allowed, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("security.%s: %w", name, err)
	}
	return &Listener{Credentials: c, name: name, allowed: allowed}, nil
}

// SetConfig applies a reloaded config's allowed_identities: new
// handshakes are checked against them and the connections of identities
// no longer allowed are closed. Other changes of security.<listener>
// (files, insecure_plaintext) need a restart.
func (l *Listener) SetConfig(sec *config.Security) {
	l.allowed.Set(sec.Listener(l.name).AllowedIdentities)
}

// CloseUnless closes the open connections whose client certificate keep
// rejects (AllowList.CloseUnless); why is logged.
func (l *Listener) CloseUnless(keep func(*x509.Certificate) bool, why string) {
	l.allowed.CloseUnless(keep, why)
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
