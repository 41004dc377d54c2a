package swarm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/test/envoysim"
)

// swarmSize is one run's scale. The full run (SWARMGATE_SWARM_FULL=1) is
// 500 agents; otherwise (and always under -short) 50, so `make test` stays
// fast. wall bounds a variant; it is far above what a run takes (1-30 s)
// so that a loaded machine only makes a run slower: a request still
// unanswered at the bound fails the test.
type swarmSize struct {
	agents, perAgent int
	wall             time.Duration
}

func sizeFor(t *testing.T) swarmSize {
	if fullSwarm() {
		return swarmSize{agents: 500, perAgent: 10, wall: 4 * time.Minute}
	}
	return swarmSize{agents: 50, perAgent: 6, wall: 2 * time.Minute}
}

// swarmRelays: three relays with different limits, failure rates and
// speeds, sized against the run's request count n so both sizes behave
// alike. Mock RPM windows are one minute, longer than a run: each key's
// RPM is its quota for the run. Capacity: relay-a 0.30·n, relay-b
// 0.30·n, relay-c (priority 1, slow) 0.50·n.
func swarmRelays(n int) []relaySpec {
	rpm := func(f float64) int { return max(int(math.Ceil(f*float64(n))), 1) }
	return []relaySpec{
		{name: "relay-a", keys: 3, priority: 0, weight: 2, keyRPM: rpm(0.10), ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: rpm(0.10), FailProbability: 0.02, FailAction: mockupstream.ActError, Status: 500}},
		{name: "relay-b", keys: 2, priority: 0, weight: 1, keyRPM: rpm(0.15), ttft: 40 * time.Millisecond, perToken: 3 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: rpm(0.15), FailProbability: 0.08, FailAction: mockupstream.ActError, Status: 503}},
		{name: "relay-c", keys: 2, priority: 1, weight: 1, keyRPM: rpm(0.25), ttft: 80 * time.Millisecond, perToken: 4 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: rpm(0.25), FailProbability: 0.01, FailAction: mockupstream.ActError, Status: 502}},
	}
}

// swarmResult is what the agents saw, and what the relays and the
// ledger recorded of the same run.
type swarmResult struct {
	name                    string
	total, ok, rl, fail, to int // to: not answered within the wall bound
	lat                     []time.Duration
	wall                    time.Duration
	errs                    map[string]int // other errors by status and code
	// malformed are answers that are neither a success nor a well-formed
	// refusal (first few, and how many).
	malformed  []string
	nMalformed int
	upstream   mockupstream.Counters // summed over the relays
	ledger     string                // the ledger against the relays' usage
}

func (r swarmResult) completion() float64 { return float64(r.ok) / float64(r.total) }

func (r swarmResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(int(math.Ceil(p*float64(len(r.lat))))-1, len(r.lat)-1)]
}

const swarmHeader = "| variant | requests | completed | p50 ms | p95 ms | p99 ms | 429 to clients | other errors | unanswered | upstream 429s | wall | ledger |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

func (r swarmResult) row() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %s | %d | %.1f %% | %s | %s | %s | %d | %d | %d | %d | %.1f s | %s |", r.name, r.total, 100*r.completion(),
		ms(r.pct(0.50)), ms(r.pct(0.95)), ms(r.pct(0.99)), r.rl, r.fail, r.to, r.upstream.RateLimited, r.wall.Seconds(), r.ledger)
}

// refusalProblem says why err is not a well-formed refusal ("" when it
// is one): an HTTP answer, 429 or 5xx, with an OpenAI error body; a 429
// also carries Retry-After. A 4xx other than 429 (a provider's 401 that
// leaked, a request we built wrong) or a connection error is not one.
func refusalProblem(err error) string {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return "no HTTP answer: " + err.Error()
	}
	st := apiErr.StatusCode
	switch {
	case st != http.StatusTooManyRequests && st < 500:
		return fmt.Sprintf("%d %s is not a refusal", st, apiErr.Code)
	case apiErr.Message == "" || apiErr.Type == "":
		return fmt.Sprintf("%d without an OpenAI error body: %.160q", st, apiErr.RawJSON())
	case st == http.StatusTooManyRequests && apiErr.Response.Header.Get("Retry-After") == "":
		return fmt.Sprintf("429 %s without Retry-After", apiErr.Code)
	}
	return ""
}

// runSwarm starts the agents: goroutines issuing chat completions with the
// openai-go SDK (every third one streaming), a fixed number each, without
// SDK retries, so every 429 is counted.
func runSwarm(t *testing.T, name, baseURL, key string, sz swarmSize) swarmResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sz.wall)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * sz.agents, MaxIdleConnsPerHost: 2 * sz.agents, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	client := sdkClient(baseURL, key, hc)
	res := swarmResult{name: name, total: sz.agents * sz.perAgent, errs: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for a := range sz.agents {
		wg.Go(func() {
			for j := range sz.perAgent {
				if ctx.Err() != nil {
					mu.Lock()
					res.to++
					mu.Unlock()
					continue
				}
				p := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You are agent " + fmt.Sprint(a) + " of a swarm."), openai.UserMessage("Plan step " + fmt.Sprint(j) + " of the task.")}}
				t0 := time.Now()
				var err error
				if (a+j)%3 == 0 {
					s := client.Chat.Completions.NewStreaming(ctx, p)
					chunks := 0
					for s.Next() {
						chunks++
					}
					err = s.Err()
					if err == nil && chunks == 0 {
						err = errors.New("empty stream")
					}
					_ = s.Close()
				} else {
					var r *openai.ChatCompletion
					r, err = client.Chat.Completions.New(ctx, p)
					if err == nil && len(r.Choices) == 0 {
						err = errors.New("no choices")
					}
				}
				d := time.Since(t0)
				var apiErr *openai.Error
				mu.Lock()
				switch {
				case err == nil:
					res.ok++
					res.lat = append(res.lat, d)
				case ctx.Err() != nil:
					res.to++
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests:
					res.rl++
				default:
					res.fail++
					if errors.As(err, &apiErr) {
						res.errs[fmt.Sprintf("%d %s", apiErr.StatusCode, apiErr.Code)]++
					} else {
						res.errs[err.Error()]++
					}
				}
				if err != nil && ctx.Err() == nil {
					if why := refusalProblem(err); why != "" {
						res.nMalformed++
						if len(res.malformed) < 5 {
							res.malformed = append(res.malformed, why)
						}
					}
				}
				mu.Unlock()
				// Think time: an agent reads the answer before its next call.
				time.Sleep(time.Duration(5+(a*7+j*13)%20) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	slices.Sort(res.lat)
	return res
}

// TestSwarm runs an agent swarm through swarmgate's policy (three relays,
// key pools with breakers and rotation, Envoy retries, EDS failover) and,
// for comparison, through a baseline of one key on one relay with no
// breaker, rotation or failover. What it asserts holds however fast the
// machine is: every request is answered, with a success or a well-formed
// refusal (a provider's 401 never leaks, no connection is dropped); every
// success is a relay's 200 and every relay's 200 a success; no relay saw a
// request without a valid key; the ledger equals the relays' usage
// exactly. Completion rates, 429s and latencies depend on how the
// machine's CPU keeps up with the relays' quota windows and cooldowns:
// they are logged as a table (docs/swarm.md records them), not asserted.
// The policy runs on envoysim and on the real Envoy (newest release; with
// SWARMGATE_SWARM_FULL=1 at 100 and 500 agents).
func TestSwarm(t *testing.T) {
	sz := sizeFor(t)
	n := sz.agents * sz.perAgent
	relays := swarmRelays(n)
	// The policy as documented: breakers fed by the providers' 429s,
	// Retry-After and x-ratelimit-remaining-* (honour_remaining), rotation,
	// retries and EDS failover. A second run also sets each key's rpm in
	// the gateway config (local windows in the upstream replica).
	policy := func(rs []relaySpec, keyRPM bool) stackSpec {
		rs = slices.Clone(rs)
		for i := range rs {
			if !keyRPM {
				rs[i].keyRPM = 0
			}
		}
		return stackSpec{
			relays: rs, replicas: 2, routerOn: []int{0}, upstreamOn: []int{1},
			breaker:    "  consecutive_429: 3\n  consecutive_5xx: 3\n  cooldown: 2s\n  max_cooldown: 10s\n  sync_interval: 200ms\n  honour_remaining: true",
			numRetries: 2,
			accounting: true,
		}
	}
	var rows []swarmResult
	runPolicy := func(t *testing.T, name string, keyRPM bool) {
		sp := policy(relays, keyRPM)
		s := startStack(t, sp)
		res := runSwarm(t, name, s.sim.URL(), agentKey, sz)
		st := s.sim.Stats()
		t.Logf("envoysim retries %d (overflow %d, limit exceeded %d), no healthy upstream %d, upstream local replies %d",
			st.Retries, st.RetryOverflow, st.RetryLimitExceeded, st.NoHealthyUpstream, st.UpstreamImmediateResponses)
		rows = append(rows, checkSwarm(t, res, s.relays, s.ledger, s.cfg))
	}
	t.Run("policy", func(t *testing.T) { runPolicy(t, "swarmgate policy", false) })
	t.Run("policy_key_rpm", func(t *testing.T) { runPolicy(t, "swarmgate policy + key rpm in config", true) })

	// The same policy through the real Envoy: the whole swarmgate in one
	// process (as `swarmgate serve`), Envoy bootstrapped from it.
	rel := envoytest.Newest(t)
	sizes := []swarmSize{sz}
	if fullSwarm() {
		sizes = []swarmSize{{agents: 100, perAgent: 10, wall: sz.wall}, sz}
	}
	for _, esz := range sizes {
		t.Run(fmt.Sprintf("envoy-%s/agents=%d", rel.Version, esz.agents), func(t *testing.T) {
			en := esz.agents * esz.perAgent
			s := startEnvoyStack(t, policy(swarmRelays(en), false), rel)
			res := runSwarm(t, fmt.Sprintf("swarmgate policy, Envoy %s, %d agents", rel.Version, esz.agents), s.url, agentKey, esz)
			rows = append(rows, checkSwarm(t, res, s.relays, s.ledger, s.cfg))
		})
	}

	t.Run("baseline", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		r := relays[0]
		m := mockupstream.New(mockupstream.Options{Keys: []mockupstream.Key{{ID: relayKeyID(r.name, 0), Value: relaySecret(r.name, 0)}},
			Models: []string{model}, CompletionTokens: 8, TTFT: r.ttft, InterTokenDelay: r.perToken, Default: r.mock, Seed: 1})
		if _, err := m.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		// The same simulated Envoy with one cluster of one endpoint, no
		// filters and no retry policy: agents hold the relay key themselves.
		sim, err := envoysim.New(envoysim.Config{
			Routes:   []envoysim.Route{{Name: "all", PathPrefix: "/", Cluster: "relay", Timeout: 20 * time.Second}},
			Clusters: []envoysim.Cluster{{Name: "relay", Endpoints: []envoysim.Endpoint{{Address: m.Addr().String()}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		res := runSwarm(t, "baseline: 1 key, 1 relay", sim.URL(), relaySecret(r.name, 0), sz)
		res.upstream = m.Total()
		res.ledger = "none"
		if res.total == 0 || res.to > 0 {
			t.Errorf("baseline: %d requests, %d unanswered", res.total, res.to)
		}
		rows = append(rows, res)
	})

	t.Logf("%d agents × %d requests (every third streamed), openai-go SDK, bound %v per variant", sz.agents, sz.perAgent, sz.wall)
	t.Log("\n" + swarmHeader)
	for _, r := range rows {
		t.Log(r.row())
	}
	for _, r := range rows {
		t.Logf("other errors, %s: %v", r.name, r.errs)
	}
}

// checkSwarm asserts what a swarm run through swarmgate must show however
// loaded the machine is, and fills in the relays' and the ledger's side
// of res.
func checkSwarm(t *testing.T, res swarmResult, relays map[string]*mockupstream.Server, led *ledger.Ledger, cfg *config.Config) swarmResult {
	t.Helper()
	if res.total == 0 || res.ok == 0 {
		t.Fatalf("%s: %d of %d requests completed", res.name, res.ok, res.total)
	}
	if res.to > 0 {
		t.Errorf("%s: %d of %d requests unanswered within %v", res.name, res.to, res.total, res.wall)
	}
	if res.nMalformed > 0 {
		t.Errorf("%s: %d answers neither a success nor a well-formed refusal, e.g. %q", res.name, res.nMalformed, res.malformed)
	}
	res.upstream, res.ledger = checkAccounts(t, res.name, res.ok, relays, led, cfg)
	return res
}

// checkAccounts asserts that the clients' successes, the relays' records
// and swarmgate's ledger of tenant "swarm" agree exactly: every success is
// a relay's 200 and every relay's 200 a success, no relay saw a request
// without a valid key, and the ledger holds the relays' usage, priced. It
// returns the relays' counters summed and the ledger as a table cell.
func checkAccounts(t *testing.T, name string, clientOK int, relays map[string]*mockupstream.Server, led *ledger.Ledger, cfg *config.Config) (mockupstream.Counters, string) {
	t.Helper()
	// A relay records its 200 once the last byte is written, which may
	// be just after the client has read it.
	waitFor(30*time.Second, func() bool {
		ok := 0
		for _, m := range relays {
			ok += m.Total().OK
		}
		return ok >= clientOK
	})
	var up mockupstream.Counters
	var per []string
	for _, name := range slices.Sorted(maps.Keys(relays)) {
		c := relays[name].Total()
		up.Requests += c.Requests
		up.OK += c.OK
		up.RateLimited += c.RateLimited
		up.Errors += c.Errors
		up.Resets += c.Resets
		up.Unauthorized += c.Unauthorized
		up.Canceled += c.Canceled
		per = append(per, fmt.Sprintf("%s ok %d 429 %d err %d 401 %d", name, c.OK, c.RateLimited, c.Errors, c.Unauthorized))
	}
	t.Logf("%s: upstream %s", name, strings.Join(per, "; "))
	if up.Unauthorized > 0 {
		t.Errorf("%s: relays saw %d requests without a valid key", name, up.Unauthorized)
	}
	if clientOK != up.OK {
		t.Errorf("%s: clients completed %d requests, relays answered %d with 200", name, clientOK, up.OK)
	}
	n, u, cost := relaysUsage(relays, cfg)
	ctx := context.Background()
	var got ledger.Report
	ok := waitFor(30*time.Second, func() bool {
		var err error
		got, err = led.Query(ctx, "swarm", ledger.MonthOf(time.Now()))
		return err == nil && got.Total.Requests == int64(n) && got.Total.InputTokens == u.PromptTokens &&
			got.Total.OutputTokens == u.CompletionTokens && got.Total.Cost == cost
	})
	cell := fmt.Sprintf("%d req, %d/%d tok, %s", got.Total.Requests, got.Total.InputTokens, got.Total.OutputTokens, got.Total.Cost)
	if !ok {
		t.Errorf("%s: ledger %+v, relays' usage %d requests, %d in / %d out tokens, cost %s", name, got.Total, n, u.PromptTokens, u.CompletionTokens, cost)
	} else {
		cell += " = relays"
	}
	return up, cell
}

// waitFor polls cond every 10 ms until it holds (true) or within passes.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
