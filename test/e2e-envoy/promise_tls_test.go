package e2eenvoy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

const (
	idSwarmgate = "spiffe://swarmgate.test/ns/swarmgate/sa/swarmgate"
	idEnvoy     = "spiffe://swarmgate.test/ns/swarmgate/sa/envoy"
	idStranger  = "spiffe://swarmgate.test/ns/agents/sa/worker"
)

// tlsConfig: mutual TLS on every gRPC listener (xDS, ext_proc, rate-limit
// service), Envoy presenting its own identity, and a tenant limited to two
// requests a minute so the rate-limit service is seen answering.
const tlsConfig = `
security:
  tls: {cert_file: %[1]s, key_file: %[2]s, client_ca_file: %[3]s}
  xds:
    allowed_identities: [%[4]s, %[5]s]
    server_identity: %[4]s
    node_groups:
      - {identity: %[5]s, groups: [envoy]}
      - {identity: %[4]s, groups: [extproc, ratelimit]}
  extproc: {allowed_identities: [%[5]s], server_identity: %[4]s}
  ratelimit: {allowed_identities: [%[5]s, %[4]s], server_identity: %[4]s}
  envoy: {cert_file: %[6]s, key_file: %[7]s, ca_file: %[3]s}
request:
  message_timeout: 5s
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
  - name: limited
    models: ["*"]
    keys:
      - {id: limited-1, hash: {keyLimited}}
    limits: {rpm: 2}
`

// TestPromiseMutualTLS: Envoy reaches the control plane, ext_proc and the
// rate-limit service over mutual TLS (every handshake counted on Envoy's
// clusters), and those listeners refuse a client without a certificate or
// with one whose identity is not allowed.
func TestPromiseMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	sg := ca.Issue(t, dir, "swarmgate", idSwarmgate)
	envoy := ca.Issue(t, dir, "envoy", idEnvoy)
	stranger := ca.Issue(t, dir, "stranger", idStranger)
	body := fmt.Sprintf(tlsConfig, sg.CertFile, sg.KeyFile, ca.CAFile, idSwarmgate, idEnvoy, envoy.CertFile, envoy.KeyFile)

	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: body, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}},
		}})
		ctx := testCtx(t)

		// Routed at all means xDS and ext_proc work; a 429 for the
		// limited tenant means the rate-limit service answered (the filter
		// fails open when it cannot reach it).
		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "over mutual TLS"); err != nil {
			t.Fatal(err)
		}
		limited := false
		for i := range 5 {
			_, err := s.chat(ctx, keyLimited, "gpt-4o-mini", fmt.Sprintf("limited %d", i))
			if statusOf(err) == http.StatusTooManyRequests {
				limited = true
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !limited {
			t.Error("the rpm: 2 tenant was never limited: the rate-limit service was not reached")
		}
		for _, cluster := range []string{"swarmgate_xds", "swarmgate_extproc", "swarmgate_ratelimit"} {
			n, err := s.envoyStat(ctx, "cluster."+cluster+".ssl.handshake")
			if err != nil {
				t.Fatal(err)
			}
			if n < 1 {
				t.Errorf("cluster %s: %d TLS handshakes", cluster, n)
			}
		}

		// The listeners themselves: no client certificate, or an identity
		// none of them allows, is refused.
		for name, addr := range map[string]string{"xds": s.ports.XDS, "extproc": s.ports.ExtProc, "ratelimit": s.ports.RateLimit} {
			if err := tlsProbe(ctx, addr, ca.CAFile, nil); err == nil {
				t.Errorf("%s accepted a client without a certificate", name)
			}
			if err := tlsProbe(ctx, addr, ca.CAFile, &stranger); err == nil {
				t.Errorf("%s accepted the identity %s", name, idStranger)
			}
			if err := tlsProbe(ctx, addr, ca.CAFile, &envoy); err != nil {
				t.Errorf("%s refused Envoy's certificate: %v", name, err)
			}
		}
	})
}

// tlsProbe opens a TLS connection as a gRPC client would (ALPN h2) with
// the leaf's certificate (none when nil), sends the HTTP/2 preface and
// reports whether the server kept the connection: a server refusing the
// client certificate answers with an alert, seen on the first read.
func tlsProbe(ctx context.Context, addr, caFile string, leaf *trusttest.Leaf) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
		// The servers present the swarmgate identity (a URI SAN), not a
		// host name: check the chain, then the URI.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			cert, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
				return err
			}
			for _, u := range cert.URIs {
				if u.String() == idSwarmgate {
					return nil
				}
			}
			return fmt.Errorf("server certificate without %s", idSwarmgate)
		}}
	if leaf != nil {
		c, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 9)
	_, err = conn.Read(buf) // the server's SETTINGS frame, or the alert
	return err
}
