package e2eenvoy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// keysConfig: three relays of one model with different base paths and auth
// styles (priorities 0, 1, 2), and two backends of their own for the
// revoked-key and all-keys-open promises, so breaker state never crosses
// subtests.
const keysConfig = `
request:
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_429: 1
  consecutive_5xx: 1
  sync_interval: 50ms
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    auth: bearer
    keys:
      - {id: pa-1, secret: env:P_A1}
      - {id: pa-2, secret: env:P_A2}
  - name: relay-b
    base_url: http://{relay-b}/openai/v1
    auth: x-api-key
    keys:
      - {id: pb-1, secret: env:P_B1}
  - name: relay-c
    base_url: http://{relay-c}/azure/v1
    auth: api-key
    keys:
      - {id: pc-1, secret: env:P_C1}
  - name: relay-r
    base_url: http://{relay-r}/v1
    keys:
      - {id: pr-1, secret: env:P_C2}
      - {id: pr-2, secret: env:P_D1}
  - name: relay-x
    base_url: http://{relay-x}/v1
    keys:
      - {id: px-1, secret: env:P_B2}
      - {id: px-2, secret: env:P_A1}
models:
  - name: tri
    targets:
      - {backend: relay-a}
      - {backend: relay-b, model: openai/gpt-4o-mini, priority: 1}
      - {backend: relay-c, priority: 2}
  - name: revoke
    targets:
      - {backend: relay-r}
  - name: exhaust
    targets:
      - {backend: relay-x}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

func keysRelays() []relaySpec {
	return []relaySpec{
		{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1", "pa-2": "P_A2"}},
		{name: "relay-b", auth: config.AuthXAPIKey, keys: map[string]string{"pb-1": "P_B1"}},
		{name: "relay-c", auth: config.AuthAPIKey, keys: map[string]string{"pc-1": "P_C1"}},
		{name: "relay-r", auth: config.AuthBearer, keys: map[string]string{"pr-1": "P_C2", "pr-2": "P_D1"}},
		{name: "relay-x", auth: config.AuthBearer, keys: map[string]string{"px-1": "P_B2", "px-2": "P_A1"}},
	}
}

// TestPromiseKeys: what the per-attempt key choice promises, on the real
// Envoy's one request header map shared by every attempt.
func TestPromiseKeys(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{relays: keysRelays(), body: keysConfig})

		// A request rate limited on relay-a (/v1, bearer) and relay-b
		// (/openai/v1, x-api-key) is served by relay-c (/azure/v1,
		// api-key): three attempts, each with its own request line and
		// only its own credential, nothing internal.
		t.Run("retries across three relays", func(t *testing.T) {
			ctx := testCtx(t)
			rl := mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second}
			s.relays["relay-a"].SetBehavior("pa-1", rl)
			s.relays["relay-a"].SetBehavior("pa-2", rl)
			s.relays["relay-b"].SetBehavior("pb-1", rl)
			resp, err := s.chat(ctx, keyTeam, "tri", "three relays")
			if err != nil {
				t.Fatal(err)
			}
			if resp.Usage.CompletionTokens != 7 {
				t.Errorf("usage %+v", resp.Usage)
			}
			for _, w := range []struct{ relay, path string }{
				{"relay-a", "/v1/chat/completions"},
				{"relay-b", "/openai/v1/chat/completions"},
				{"relay-c", "/azure/v1/chat/completions"},
			} {
				rel := s.relays[w.relay]
				got := rel.seenRequests()
				if len(got) != 1 {
					t.Errorf("%s saw %d requests, want 1: %+v", w.relay, len(got), got)
					continue
				}
				if got[0].Path != w.path {
					t.Errorf("%s: request line %q, want %q", w.relay, got[0].Path, w.path)
				}
				if !slices.Equal(got[0].Creds, []string{rel.ownCredential()}) {
					t.Errorf("%s saw credential headers %v, want only its own %s", w.relay, got[0].Creds, rel.ownCredential())
				}
				recs := rel.Requests()
				if len(recs) != 1 || recs[0].KeyID == "" {
					t.Errorf("%s: the credential was not one of its keys: %+v", w.relay, recs)
					continue
				}
				for h := range recs[0].Headers {
					if strings.HasPrefix(strings.ToLower(h), "x-swarmgate-") {
						t.Errorf("%s: internal header %s left Envoy", w.relay, h)
					}
				}
			}
			if rec := s.relays["relay-b"].Requests(); len(rec) == 1 && rec[0].Model != "openai/gpt-4o-mini" {
				t.Errorf("relay-b got model %q, want its upstream name", rec[0].Model)
			}
			if c := s.relays["relay-c"].Total(); c.OK != 1 {
				t.Errorf("relay-c answered %+v", c)
			}
		})

		// A pooled key the provider refuses with 401 (revoked) costs the
		// client nothing: the attempt is retried on the other key and the
		// refused key's breaker opens, so it is not tried again.
		t.Run("revoked key costs no error", func(t *testing.T) {
			ctx := testCtx(t)
			rel := s.relays["relay-r"]
			rel.SetBehavior("pr-1", mockupstream.Behavior{Action: mockupstream.ActError, Status: http.StatusUnauthorized})
			const n = 8
			for i := range n {
				if _, err := s.chat(ctx, keyTeam, "revoke", fmt.Sprintf("revoked %d", i)); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if got := rel.Count("pr-1").Requests; got != 1 {
				t.Errorf("the revoked key was tried %d times, want once", got)
			}
			if got := rel.Count("pr-2").OK; got != n {
				t.Errorf("pr-2 answered %d of %d", got, n)
			}
			ks, err := s.keyStates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if k := ks["pr-1"]; k.State != "open" || k.Trips != 1 {
				t.Errorf("revoked key's breaker: %+v, want open after one trip", k)
			}
			if k := ks["pr-2"]; k.State != "closed" {
				t.Errorf("good key's breaker: %+v", k)
			}
		})

		// Every key of a backend rate limited: the client gets a 429 in
		// OpenAI's shape with Retry-After, and no attempt leaves Envoy
		// without a credential (a local reply of the upstream filter is
		// the last attempt, not a bare request to the relay).
		t.Run("all keys open", func(t *testing.T) {
			ctx := testCtx(t)
			rel := s.relays["relay-x"]
			rl := mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 20 * time.Second}
			rel.SetBehavior("px-1", rl)
			rel.SetBehavior("px-2", rl)
			c := s.client(keyTeam)
			for i, wantCode := range []string{"", "upstream_keys_exhausted"} {
				var resp *http.Response
				_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: "exhaust", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("exhaust")},
				}, option.WithResponseInto(&resp))
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("request %d: err %v, want a 429", i+1, err)
				}
				if wantCode != "" && apiErr.Code != wantCode {
					t.Errorf("request %d: code %q, want %q", i+1, apiErr.Code, wantCode)
				}
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil || ra < 1 {
					t.Errorf("request %d: Retry-After %q", i+1, resp.Header.Get("Retry-After"))
				}
			}
			// The first request tried both keys (429 each); the second was
			// refused before any attempt.
			if got := rel.Total(); got.Requests != 2 || got.RateLimited != 2 {
				t.Errorf("relay-x counts %+v, want two 429s", got)
			}
		})

		// Across every subtest, no relay saw a request without its own
		// credential or with another relay's.
		for name, rel := range s.relays {
			for i, q := range rel.seenRequests() {
				if !slices.Equal(q.Creds, []string{rel.ownCredential()}) {
					t.Errorf("%s request %d carried credential headers %v, want only %s", name, i, q.Creds, rel.ownCredential())
				}
			}
			if u := rel.Total().Unauthorized; u != 0 {
				t.Errorf("%s refused %d credentials", name, u)
			}
		}
	})
}
