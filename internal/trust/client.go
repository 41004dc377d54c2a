package trust

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ClientPolicy is how swarmgate's own processes dial each other.
type ClientPolicy struct {
	Files // Cert and Key: the client certificate (optional); CA: verifies the server
	// ServerIdentity, when set, is the identity the server must carry (URI
	// or DNS SAN); otherwise the host name dialled is checked.
	ServerIdentity string
	ReloadInterval time.Duration
	Logger         *slog.Logger
}

// ClientCredentials are plaintext when p has no CA, TLS otherwise. The
// client certificate and the CA are re-read when they change, like the
// server's.
func ClientCredentials(p ClientPolicy) (credentials.TransportCredentials, error) {
	if p.CA == "" {
		return insecure.NewCredentials(), nil
	}
	st, err := newStore(p.Files, p.ReloadInterval, p.Logger, nil)
	if err != nil {
		return nil, err
	}
	cfg := func(host string) *tls.Config { return clientConfig(st, p.ServerIdentity, host) }
	return &hostCreds{TransportCredentials: credentials.NewTLS(cfg("")), cfg: cfg}, nil
}

// hostCreds builds the TLS config per handshake with the host name dialled:
// crypto/tls does not report it to VerifyConnection when it is an IP
// address (no SNI), and without it a server certificate for any name the
// CA signed would pass.
type hostCreds struct {
	credentials.TransportCredentials
	cfg func(host string) *tls.Config
}

func (c *hostCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	return credentials.NewTLS(c.cfg(host)).ClientHandshake(ctx, authority, raw)
}

func (c *hostCreds) Clone() credentials.TransportCredentials {
	return &hostCreds{TransportCredentials: c.TransportCredentials.Clone(), cfg: c.cfg}
}

// clientConfig is the tls.Config of one handshake to host. The chain is
// verified in VerifyConnection against the CA of the moment (crypto/tls
// cannot swap RootCAs per handshake), hence InsecureSkipVerify: it turns
// off only the built-in check, which this one replaces.
func clientConfig(st *store, want, host string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := st.get().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("trust: server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			opts := x509.VerifyOptions{Roots: st.get().pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if want == "" {
				if host == "" {
					return errors.New("trust: no host name to check the server certificate against; set server_identity")
				}
				opts.DNSName = host
			}
			if _, err := leaf.Verify(opts); err != nil {
				return fmt.Errorf("trust: server certificate: %w", err)
			}
			if want != "" && !Matches(leaf, want) {
				return fmt.Errorf("trust: server identity %v, want %s", Describe(leaf), want)
			}
			return nil
		},
	}
}
