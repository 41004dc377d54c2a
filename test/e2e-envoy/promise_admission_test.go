package e2eenvoy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// admissionConfig: one key that takes one request at a time, a relay that
// answers after 800 ms, and a queue of up to 5 s. message_timeout is 300 ms:
// a waiting request outlives it only because ext_proc extends the timer
// with override_message_timeout (up to the generated max_message_timeout).
const admissionConfig = `
request:
  message_timeout: 300ms
admission:
  max_wait: 5s
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1, max_in_flight: 1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseAdmissionQueue: a request whose only obstacle is a busy key
// waits in the router-level ext_proc (Envoy keeps the stream open past
// message_timeout) and goes on when the key frees, instead of a 429.
func TestPromiseAdmissionQueue(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		const latency = 800 * time.Millisecond
		s := startPStack(t, r, pstackOptions{body: admissionConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.Default = mockupstream.Behavior{Latency: latency} }},
		}})
		ctx := testCtx(t)
		type result struct {
			err  error
			done time.Time
		}
		first := make(chan result, 1)
		go func() {
			_, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "holds the key")
			first <- result{err, time.Now()}
		}()
		// The second request once the first holds the key.
		eventually(ctx, t, "the first request at the relay", func() (bool, string) {
			n := len(s.relays["relay-a"].seenRequests())
			return n == 1, fmt.Sprintf("%d requests at the relay", n)
		})
		start := time.Now()
		_, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "waits for the key")
		secondDone := time.Now()
		if err != nil {
			t.Fatalf("the queued request: %v", err)
		}
		f := <-first
		if f.err != nil {
			t.Fatalf("the first request: %v", f.err)
		}
		waited := secondDone.Sub(start)
		t.Logf("Envoy %s: the second request took %v (the relay answers in %v)", r.Version, waited, latency)
		// It was held, not refused and not sent alongside: it reached the
		// relay only after the first answer, so it took longer than its
		// own answer and ended after the first.
		if waited < latency+200*time.Millisecond || !secondDone.After(f.done) {
			t.Errorf("the second request took %v and ended %v after the first: not queued behind it", waited, secondDone.Sub(f.done))
		}
		recs := s.relays["relay-a"].Requests()
		if len(recs) != 2 {
			t.Fatalf("relay records %+v", recs)
		}
		if gap := recs[1].Time.Sub(recs[0].Time); gap < latency {
			t.Errorf("the relay got the second request %v after the first, while the first was still in flight", gap)
		}
		if c := s.relays["relay-a"].Total(); c.OK != 2 {
			t.Errorf("relay counts %+v", c)
		}
	})
}

// slowKeyConfig: one key of 60 requests a minute, which its provider
// enforces as one a second, paced by swarmgate (a slot every 1.05 s);
// message_timeout 300 ms, so a pick may wait 150 ms for a slot without
// extending Envoy's timer. The first answer's remaining 0 rests the key
// until its reset (honour_remaining); the only backend stays in EDS (a pool
// with nowhere to fail over to keeps its targets), so a second request that
// reaches Envoy's routing after that answer (a loaded machine) is still
// routed and its pick waits for the key.
const slowKeyConfig = `
request:
  message_timeout: 300ms
admission:
  max_wait: 5s
  pace: true
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1, rpm: 60}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseSlowKeyPaced: two requests at once on a key paced slower than
// the upstream filter's message_timeout allows a pick to wait. The
// admission queue lets both through (its burst); the second attempt's key
// pick extends the upstream filter's headers message
// (override_message_timeout, within the generated max_message_timeout) and
// waits for the key's next slot, so the provider, which takes one request
// a second, answers both and refuses none. Before, the pick went on
// without a slot after 150 ms and the provider answered 429.
func TestPromiseSlowKeyPaced(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: slowKeyConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) {
					o.Default = mockupstream.Behavior{RPM: 60, Window: time.Second}
				}},
		}})
		ctx := testCtx(t)
		errs := make(chan error, 2)
		for i := range 2 {
			go func() {
				_, err := s.chat(ctx, keyTeam, "gpt-4o-mini", fmt.Sprintf("request %d", i))
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("request: %s", describeErr(err))
			}
		}
		recs := s.relays["relay-a"].Requests()
		if c := s.relays["relay-a"].Total(); c.OK != 2 || c.RateLimited != 0 || len(recs) != 2 {
			var seen []string
			for _, rec := range recs {
				seen = append(seen, fmt.Sprintf("%d at +%v", rec.Status, rec.Time.Sub(recs[0].Time)))
			}
			t.Fatalf("relay counts %+v (%v); want two served and no 429", c, seen)
		}
		gap := recs[1].Time.Sub(recs[0].Time)
		t.Logf("Envoy %s: the relay got the second request %v after the first", r.Version, gap)
		if gap < 900*time.Millisecond {
			t.Errorf("the second request reached the relay %v after the first: not paced to the key's slot", gap)
		}
		if n, err := s.metric(ctx, "swarmgate_keypool_pace_extended_total", nil); err != nil || n < 1 {
			t.Errorf("pace extensions %v (err %v); want the second pick to have extended its message", n, err)
		}
	})
}

// describeErr gives an API error's status, code, message and Retry-After:
// a refusal's reason, not only its status.
func describeErr(err error) string {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return err.Error()
	}
	ra := ""
	if apiErr.Response != nil {
		ra = apiErr.Response.Header.Get("Retry-After")
	}
	return fmt.Sprintf("%d %s: %s (Retry-After %q)", apiErr.StatusCode, apiErr.Code, apiErr.Message, ra)
}
