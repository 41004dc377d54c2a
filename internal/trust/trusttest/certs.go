// Package trusttest issues throwaway certificates for tests: a CA and leaf
// certificates with SPIFFE URI SANs and DNS SANs, written as PEM files.
package trusttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// TB is what the helpers need of a testing.TB (the load generator passes
// its own, which panics).
type TB interface {
	Helper()
	Fatal(args ...any)
}

// CA is a test certificate authority.
type CA struct {
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	CAFile string // PEM of Cert
}

var serial atomic.Int64

// NewCA creates a CA and writes its certificate to dir/<name>-ca.crt.
func NewCA(t TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, CAFile: filepath.Join(dir, name+"-ca.crt")}
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Leaf is an issued certificate and its key on disk.
type Leaf struct {
	CertFile, KeyFile string
}

// Issue writes dir/<name>.crt and dir/<name>.key: a certificate for both
// server and client use with the given SANs (entries with "://" are URI
// SANs, others DNS names; "127.0.0.1" style entries become IP SANs).
func (ca *CA) Issue(t TB, dir, name string, sans ...string) Leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, s := range sans {
		if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
			tmpl.URIs = append(tmpl.URIs, u)
		} else if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	// Key first, then certificate, each by rename: a reader never sees a
	// half-written file (what a Kubernetes secret volume does too).
	writePEM(t, l.KeyFile, "PRIVATE KEY", kb)
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	return l
}

func writePEM(t TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
