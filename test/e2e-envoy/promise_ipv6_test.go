package e2eenvoy

import (
	"fmt"
	"net"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// TestPromiseIPv6Backend: a backend addressed by an IPv6 literal
// (http://[::1]:port/v1) is served through Envoy, and the Host the provider
// gets is the bracketed literal (RFC 9110's uri-host). Before, Envoy's host
// rewrite sent it bare ("::1"), a Host header servers refuse as malformed.
func TestPromiseIPv6Backend(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		mock := mockupstream.New(mockupstream.Options{Auth: config.AuthBearer, CompletionTokens: 7,
			Keys: []mockupstream.Key{{ID: "pa-1", Value: relaySecrets["P_A1"]}}, Models: []string{"gpt-4o-mini"}})
		addr, err := mock.Start(t.Context(), "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mock.Close() })
		_, port, _ := net.SplitHostPort(addr.String())
		body := fmt.Sprintf(`
backends:
  - name: v6
    base_url: http://[::1]:%s/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: v6}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`, port)
		s := startPStack(t, r, pstackOptions{body: body})
		ctx := testCtx(t)
		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "over IPv6"); err != nil {
			t.Fatalf("request to an IPv6 backend: %s", describeErr(err))
		}
		if recs := mock.Requests(); len(recs) != 1 || recs[0].Host != "[::1]" {
			t.Fatalf("provider saw %+v; want one request with Host [::1]", recs)
		}
	})
}
