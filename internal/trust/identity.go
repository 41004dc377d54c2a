package trust

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// An identity is a URI SAN when it has a scheme ("spiffe://td/ns/x/sa/y"),
// otherwise a DNS SAN. Matching is exact (DNS names ignore case); no
// wildcards, so an allow-list reads as what it admits.
func isURI(id string) bool { return strings.Contains(id, "://") }

// Matches reports whether cert carries the identity id.
func Matches(cert *x509.Certificate, id string) bool {
	if cert == nil || id == "" {
		return false
	}
	if isURI(id) {
		for _, u := range cert.URIs {
			if u.String() == id {
				return true
			}
		}
		return false
	}
	for _, d := range cert.DNSNames {
		if strings.EqualFold(d, id) {
			return true
		}
	}
	return false
}

// FirstMatch is the first identity of ids that cert carries.
func FirstMatch(cert *x509.Certificate, ids []string) (string, bool) {
	for _, id := range ids {
		if Matches(cert, id) {
			return id, true
		}
	}
	return "", false
}

// PeerCertificate is the verified client certificate of the stream's
// connection; nil on plaintext or when the client sent none.
func PeerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// Describe names a certificate for logs: its SANs, never key material.
func Describe(cert *x509.Certificate) []string {
	if cert == nil {
		return nil
	}
	out := make([]string, 0, len(cert.URIs)+len(cert.DNSNames))
	for _, u := range cert.URIs {
		out = append(out, u.String())
	}
	return append(out, cert.DNSNames...)
}
