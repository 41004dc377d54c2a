package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/test/envoysim"
)

// These tests run on envoysim's model of Envoy 1.38, where every attempt's
// upstream filter works on the router's one request header map
// (upstream_request.cc, UpstreamRequest::acceptHeadersFromRouter): what one
// attempt set for its relay is still there when the next attempt goes to
// another relay.

// lastRecord is the sim's record of the newest request (the tests send one
// at a time; Envoy may replace an edge request's x-request-id).
func lastRecord(t *testing.T, g *gateway) envoysim.Record {
	t.Helper()
	recs := g.sim.Records()
	if len(recs) == 0 {
		t.Fatal("the sim recorded no request")
	}
	return recs[len(recs)-1]
}

// onlyOwnCredential checks what one attempt put on the wire.
func onlyOwnCredential(t *testing.T, i int, a envoysim.Attempt, want string) {
	t.Helper()
	for _, h := range []string{"authorization", "x-api-key", "api-key"} {
		if got := a.Header.Get(h) != ""; got != (h == want) {
			t.Errorf("attempt %d to %s: %s present=%v (only %s may be)", i+1, a.Endpoint, h, got, want)
		}
	}
	for k := range a.Header {
		if strings.HasPrefix(strings.ToLower(k), contract.HeaderPrefix) {
			t.Errorf("attempt %d to %s: internal header %s left Envoy", i+1, a.Endpoint, k)
		}
	}
}

// A request rate limited on a relay with base path /v1 and bearer auth is
// retried on one with /openai/v1 and x-api-key, then on one with
// /azure/v1 and api-key: each attempt must carry its own request line,
// only its own credential and static headers, and nothing internal.
func TestRetriesAcrossThreeRelaysOnOneHeaderMap(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	for _, k := range []string{"relay-a-1", "relay-a-2"} {
		g.relayA.SetBehavior(k, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second})
	}
	g.relayB.SetBehavior("relay-b-1", mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second})
	resp, err := g.chat(keyTeam).New(ctx, chatParams("tri"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 7 {
		t.Errorf("usage %+v", resp.Usage)
	}
	rec := lastRecord(t, g)
	if len(rec.Attempts) != 3 {
		t.Fatalf("attempts %+v", rec.Attempts)
	}
	want := []struct{ path, cred, tag, noTag string }{
		{"/v1/chat/completions", "authorization", "", "x-relay-tag"},
		{"/openai/v1/chat/completions", "x-api-key", "x-relay-tag", "x-relay-c"},
		{"/azure/v1/chat/completions", "api-key", "x-relay-c", "x-relay-tag"},
	}
	for i, a := range rec.Attempts {
		w := want[i]
		if a.Path != w.path {
			t.Errorf("attempt %d: request line %q, want %q", i+1, a.Path, w.path)
		}
		onlyOwnCredential(t, i, a, w.cred)
		if w.tag != "" && a.Header.Get(w.tag) == "" {
			t.Errorf("attempt %d: its static header %s is missing", i+1, w.tag)
		}
		if a.Header.Get(w.noTag) != "" {
			t.Errorf("attempt %d: another relay's static header %s is present", i+1, w.noTag)
		}
	}
	c := g.relayC.Requests()
	if len(c) != 1 || c[0].KeyID != "relay-c-1" || c[0].Path != "/azure/v1/chat/completions" {
		t.Fatalf("relay-c saw %+v", c)
	}
}

// A pooled key the provider has revoked (401) costs the client nothing:
// Envoy retries on the other key, and the revoked key leaves rotation.
func TestRevokedPooledKeyCostsNoError(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	g.relayA.SetBehavior("relay-a-1", mockupstream.Behavior{Action: mockupstream.ActError, Status: http.StatusUnauthorized})
	for i := range 8 {
		if _, err := g.chat(keyTeam).New(ctx, chatParams("solo")); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := g.relayA.Count("relay-a-1").Requests; n != 1 {
		t.Errorf("the revoked key was tried %d times, want once", n)
	}
	if g.relayA.Count("relay-a-2").OK != 8 {
		t.Errorf("relay-a counts %+v", g.relayA.Counts())
	}
	var n float64
	for _, reg := range g.upMetrics {
		n += sumSeries(t, reg, "swarmgate_keypool_auth_failures_total", map[string]string{"key": "relay-a-1"})
	}
	if n != 1 {
		t.Errorf("auth failures counted %v, want 1", n)
	}
}

// When every key of a pool is rate limited the client gets a 429 in
// OpenAI's shape with Retry-After, and no attempt leaves Envoy without a
// credential.
func TestAllKeysOpenAnswers429WithRetryAfter(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	for _, k := range []string{"relay-a-1", "relay-a-2"} {
		g.relayA.SetBehavior(k, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 20 * time.Second})
	}
	var resp *http.Response
	_, err := g.chat(keyTeam).New(ctx, chatParams("solo"), option.WithResponseInto(&resp))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("err %v", err)
	}
	if resp.Header.Get("retry-after") == "" {
		t.Errorf("no Retry-After: %v", resp.Header)
	}
	rec := lastRecord(t, g)
	if !rec.UpstreamLocalReply {
		t.Errorf("the last attempt should be the upstream filter's local reply: %+v", rec.Attempts)
	}
	for i, a := range rec.Attempts {
		// An attempt the upstream filter answered locally never left
		// Envoy (no headers went on the wire).
		if a.Header != nil && a.Header.Get("authorization") == "" {
			t.Errorf("attempt %d left Envoy without a credential", i+1)
		}
	}
	if c := g.relayA.Total(); c.Unauthorized != 0 {
		t.Errorf("relay-a saw %d requests without a valid credential", c.Unauthorized)
	}
	// The next request is refused at admission, before any attempt.
	_, err = g.chat(keyTeam).New(ctx, chatParams("solo"), option.WithResponseInto(&resp))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "upstream_keys_exhausted" ||
		resp.Header.Get("retry-after") == "" {
		t.Fatalf("second request: %v", err)
	}
}

// A whole-pool outage (every endpoint UNHEALTHY in EDS) gets a clear
// answer, not panic routing to hosts without a usable key: pool clusters
// set healthy_panic_threshold 0. Here the keys themselves have room (EDS
// is behind them), so the answer is a short 429 with Retry-After; with
// every key failing, admission answers 503 before Envoy is asked.
func TestWholePoolOutageIsAClearAnswer(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	pool := contract.Pool{Alias: "gpt-4o-mini"}.Cluster()
	g.sim.SetHealthy(pool, g.relayA.Addr().String(), false)
	g.sim.SetHealthy(pool, g.relayB.Addr().String(), false)
	var resp *http.Response
	_, err := g.chat(keyTeam).New(ctx, chatParams("gpt-4o-mini"), option.WithResponseInto(&resp))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "upstream_unavailable" {
		t.Fatalf("err %v", err)
	}
	if resp.Header.Get("retry-after") == "" {
		t.Errorf("no Retry-After")
	}
	if rec := lastRecord(t, g); len(rec.Attempts) != 0 {
		t.Errorf("Envoy sent attempts to unhealthy hosts: %+v", rec.Attempts)
	}
	if g.relayA.Total().Requests+g.relayB.Total().Requests != 0 {
		t.Errorf("relays were called")
	}
}

// A client's x-request-id is a correlation label: requests reusing one are
// separate requests in the ledger.
func TestReusedClientRequestIDIsBilledEachTime(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	const n = 5
	for range n {
		if _, err := g.chat(keyTeam).New(ctx, chatParams("solo"), option.WithHeader("x-request-id", "reused-id")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "five ledger requests", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		if err != nil {
			return false
		}
		reqs := int64(0)
		for _, row := range r.Rows {
			reqs += row.Requests
		}
		return reqs == n
	})
}

// With TPM charged by Envoy's rate-limit filter, the completion tokens of
// a stream reach the rate-limit service when the stream is done. The
// filter rebuilds those descriptors in onDestroy from the request header
// map as the upstream filters left it (ratelimit.cc, Envoy 1.38): they come
// from the admission metadata, because no internal header survives.
func TestCompletionTokensReachTheRateLimitServiceAtStreamEnd(t *testing.T) {
	g := startGatewayWith(t, gatewayOptions{rateLimits: true})
	ctx := testCtx(t)
	stream := g.chat(keyTeam).NewStreaming(ctx, chatParams("gpt-4o-mini"), option.WithHeader("x-request-id", "tpm-stream"))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	rec, ok := waitRecord(t, g.sim, "tpm-stream")
	if !ok {
		t.Fatal("no record")
	}
	for k := range rec.RequestHeader {
		if strings.HasPrefix(k, contract.HeaderPrefix) {
			t.Errorf("internal header %s survived the upstream filter", k)
		}
	}
	var atRequest, atDone []string
	for _, c := range rec.RateLimitCalls {
		if c.Err != "" {
			t.Fatalf("rate-limit call failed: %s", c.Err)
		}
		for _, d := range c.Request.GetDescriptors() {
			var es []string
			for _, e := range d.GetEntries() {
				es = append(es, e.GetKey()+"="+e.GetValue())
			}
			s := strings.Join(es, ",")
			if d.GetHitsAddend() != nil {
				s += fmt.Sprintf("+%d", d.GetHitsAddend().GetValue())
			}
			if c.StreamDone {
				atDone = append(atDone, s)
			} else {
				atRequest = append(atRequest, s)
			}
		}
	}
	// The mock reports 7 completion tokens; the prompt it reports is not
	// above the estimate, so the top-up is the completion.
	want := []string{"tenant=team,limit=tpm+7", "tenant=team,model=gpt-4o-mini,limit=tpm+7"}
	if strings.Join(atDone, " ") != strings.Join(want, " ") {
		t.Fatalf("stream-done descriptors %q, want %q (request time: %q)", atDone, want, atRequest)
	}
	if len(atRequest) == 0 || !strings.Contains(strings.Join(atRequest, " "), "tenant=team,limit=tpm+") {
		t.Errorf("request-time descriptors %q", atRequest)
	}
}
