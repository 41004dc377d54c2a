package trust

import (
	"crypto/tls"
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
	// ReloadInterval: how often the files may be re-read (default 1 s).
	ReloadInterval time.Duration
	Logger         *slog.Logger
}

// ServerCredentials are the listener's gRPC transport credentials:
// plaintext when p has no certificate, TLS when it has one, mutual TLS when
// it also has a client CA. The certificate and CA are taken from the files
// at each handshake (re-read when they changed), so a rotated certificate is
// served to new connections without a restart; connections already open
// keep the certificate they were made with.
func ServerCredentials(p ServerPolicy) (credentials.TransportCredentials, error) {
	if p.Cert == "" {
		return insecure.NewCredentials(), nil
	}
	cfg, err := ServerTLSConfig(p)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// ServerTLSConfig is the tls.Config behind ServerCredentials.
func ServerTLSConfig(p ServerPolicy) (*tls.Config, error) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	allowed := append([]string(nil), p.AllowedIdentities...)
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
		if len(allowed) > 0 {
			// Runs after chain verification: the leaf is signed by the CA.
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errNoClientCert
				}
				if _, ok := FirstMatch(cs.PeerCertificates[0], allowed); !ok {
					log.Warn("TLS client refused: identity not allowed", "identities", Describe(cs.PeerCertificates[0]))
					return fmt.Errorf("client identity %v is not allowed", Describe(cs.PeerCertificates[0]))
				}
				return nil
			}
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
