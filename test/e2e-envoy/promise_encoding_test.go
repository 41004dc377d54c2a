package e2eenvoy

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// TestPromiseAcceptEncodingReadable: through real Envoy, the provider is
// asked only for encodings the gateway reads (gzip or none), whatever the
// client accepts: a brotli answer's usage would go unread and its output
// be billed as nothing.
func TestPromiseAcceptEncodingReadable(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: accountingConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.RecordHeaders = []string{"Accept-Encoding"} }},
		}})
		ctx := testCtx(t)
		for i, tc := range []struct{ client, upstream string }{
			{"br, gzip", "gzip"},
			{"br", ""},
			{"gzip", "gzip"},
		} {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.envoyURL+"/v1/chat/completions",
				bytes.NewReader([]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+keyTeam)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept-Encoding", tc.client)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("client accept-encoding %q: status %d", tc.client, resp.StatusCode)
			}
			recs := s.relays["relay-a"].Requests()
			if len(recs) != i+1 {
				t.Fatalf("relay saw %d requests, want %d", len(recs), i+1)
			}
			if got := recs[i].Headers.Get("Accept-Encoding"); got != tc.upstream {
				t.Errorf("client accept-encoding %q reached the provider as %q, want %q", tc.client, got, tc.upstream)
			}
		}
	})
}
