package trust

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ServerPolicy is one listener's TLS policy (config.Security.Listener).
type ServerPolicy struct {
	Files // Cert and Key: the server certificate; CA: verifies clients (mutual TLS)
	// AllowedIdentities, when set, are the only client identities accepted;
	// the handshake fails for any other.
	AllowedIdentities []string
	// Allowed, when set, replaces AllowedIdentities with a list a config
	// reload can change while the listener serves (AllowList.Set).
	Allowed *AllowList
	// ReloadInterval: how often the files may be re-read (default 1 s).
	ReloadInterval time.Duration
	Logger         *slog.Logger
}

// ServerCredentials are the listener's gRPC transport credentials:
// plaintext when p has no certificate, TLS when it has one, mutual TLS when
// it also has a client CA. The certificate and CA are taken from the files
// at each handshake (re-read when they changed), so a rotated certificate is
// served to new connections without a restart; connections already open
// keep the certificate they were made with. The allowed identities are
// checked at each handshake against the list of the moment, and a change
// of the list closes the connections it no longer allows (AllowList).
func ServerCredentials(p ServerPolicy) (credentials.TransportCredentials, error) {
	if p.Cert == "" {
		return insecure.NewCredentials(), nil
	}
	allow := p.allowList()
	cfg, err := serverTLSConfig(p, allow)
	if err != nil {
		return nil, err
	}
	return &allowListCreds{TransportCredentials: credentials.NewTLS(cfg), list: allow}, nil
}

// ServerTLSConfig is the tls.Config behind ServerCredentials (without the
// closing of connections a changed allow-list no longer admits).
func ServerTLSConfig(p ServerPolicy) (*tls.Config, error) {
	return serverTLSConfig(p, p.allowList())
}

func (p ServerPolicy) allowList() *AllowList {
	if p.Allowed != nil {
		return p.Allowed
	}
	return NewAllowList(p.AllowedIdentities, p.Logger)
}

func serverTLSConfig(p ServerPolicy, allow *AllowList) (*tls.Config, error) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := newStore(p.Files, p.ReloadInterval, log, func(m *material) {
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*m.cert},
			// grpc-go requires ALPN h2; a config returned by
			// GetConfigForClient is used as is.
			NextProtos: []string{"h2"},
		}
		if m.pool != nil {
			c.ClientCAs = m.pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		// Runs after chain verification (the leaf is signed by the CA) and
		// reads the list in force, which a reload may have changed.
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			var leaf *x509.Certificate
			if len(cs.PeerCertificates) > 0 {
				leaf = cs.PeerCertificates[0]
			}
			if allow.Allows(leaf) {
				return nil
			}
			log.Warn("TLS client refused: identity not allowed", "identities", Describe(leaf))
			return errNotAllowed(leaf)
		}
		m.server = c
	})
	if err != nil {
		return nil, err
	}
	if st.cur.Load().cert == nil {
		return nil, errNoCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return st.get().server, nil
		},
	}, nil
}

var (
	errNoCert       = fmt.Errorf("trust: a TLS server needs a certificate and key")
	errNoClientCert = fmt.Errorf("trust: no client certificate")
)

func errNotAllowed(cert *x509.Certificate) error {
	if cert == nil {
		return errNoClientCert
	}
	return fmt.Errorf("client identity %v is not allowed", Describe(cert))
}
