package e2eenvoy

import (
	"crypto/tls"
	"fmt"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

// TestPromiseHTTPSBackendByIP: a backend reached over HTTPS at an IP
// address, its certificate naming that address (an IP SAN), no sni set:
// Envoy verifies the IP SAN and the request is served. Before, the
// generated DNS SAN matcher never matched an IP SAN and every handshake
// failed.
func TestPromiseHTTPSBackendByIP(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "provider")
	leaf := ca.Issue(t, dir, "relay", "127.0.0.1")
	cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		mock := mockupstream.New(mockupstream.Options{Auth: config.AuthBearer, CompletionTokens: 7,
			Keys:   []mockupstream.Key{{ID: "pa-1", Value: relaySecrets["P_A1"]}},
			Models: []string{"gpt-4o-mini"}, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
		addr, err := mock.Start(t.Context(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mock.Close() })
		body := fmt.Sprintf(`
backends:
  - name: tls-ip
    base_url: https://%s/v1
    tls: {ca_file: %s}
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: tls-ip}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`, addr, ca.CAFile)
		s := startPStack(t, r, pstackOptions{body: body})
		ctx := testCtx(t)
		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "over TLS to an IP"); err != nil {
			t.Fatalf("request to an HTTPS backend addressed by IP: %s", describeErr(err))
		}
		if recs := mock.Requests(); len(recs) != 1 || recs[0].SNI != "" {
			t.Fatalf("provider saw %+v; want one request, without SNI", recs)
		}
	})
}
