package swarm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/swarmgate/swarmgate/mockupstream"
	"github.com/swarmgate/swarmgate/test/envoysim"
)

// swarmSize is one run's scale. The full run (SWARMGATE_SWARM_FULL=1) is
// 500 agents; otherwise (and always under -short) 50, so `make test` stays
// fast.
type swarmSize struct {
	agents, perAgent int
	wall             time.Duration // bound per variant
}

func sizeFor(t *testing.T) swarmSize {
	if fullSwarm() {
		return swarmSize{agents: 500, perAgent: 10, wall: 30 * time.Second}
	}
	return swarmSize{agents: 50, perAgent: 6, wall: 15 * time.Second}
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

// swarmResult is what the agents saw.
type swarmResult struct {
	name                    string
	total, ok, rl, fail, to int // to: not answered within the wall bound
	lat                     []time.Duration
	wall                    time.Duration
	errs                    map[string]int // other errors by status and code
}

func (r swarmResult) completion() float64 { return float64(r.ok) / float64(r.total) }

func (r swarmResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(int(math.Ceil(p*float64(len(r.lat))))-1, len(r.lat)-1)]
}

func (r swarmResult) row() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %s | %d | %.1f %% | %s | %s | %s | %d | %d | %d | %.1f s |", r.name, r.total, 100*r.completion(),
		ms(r.pct(0.50)), ms(r.pct(0.95)), ms(r.pct(0.99)), r.rl, r.fail, r.to, r.wall.Seconds())
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
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests:
					res.rl++
				case ctx.Err() != nil:
					res.to++
				default:
					res.fail++
					if errors.As(err, &apiErr) {
						res.errs[fmt.Sprintf("%d %s", apiErr.StatusCode, apiErr.Code)]++
					} else {
						res.errs[err.Error()]++
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

// TestSwarm compares swarmgate's policy (three relays, key pools with
// breakers and rotation, Envoy retries, EDS failover) with a baseline of
// one key on one relay, no breaker, no rotation, no failover, under the same
// agent swarm. With the policy the completion rate must be higher and the
// 429s seen by clients fewer.
func TestSwarm(t *testing.T) {
	sz := sizeFor(t)
	n := sz.agents * sz.perAgent
	relays := swarmRelays(n)

	// The policy as documented: breakers fed by the providers' 429s,
	// Retry-After and x-ratelimit-remaining-* (honour_remaining), rotation,
	// retries and EDS failover. A second run also sets each key's rpm in
	// the gateway config (local windows in the upstream replica).
	runPolicy := func(t *testing.T, name string, keyRPM bool) swarmResult {
		rs := slices.Clone(relays)
		for i := range rs {
			if !keyRPM {
				rs[i].keyRPM = 0
			}
		}
		s := startStack(t, stackSpec{
			relays: rs, replicas: 2, routerOn: []int{0}, upstreamOn: []int{1},
			breaker:    "  consecutive_429: 3\n  consecutive_5xx: 3\n  cooldown: 2s\n  max_cooldown: 10s\n  sync_interval: 200ms\n  honour_remaining: true",
			numRetries: 2,
		})
		res := runSwarm(t, name, s.sim.URL(), agentKey, sz)
		var per []string
		for _, r := range rs {
			c := s.relay(r.name).Total()
			per = append(per, fmt.Sprintf("%s ok %d 429 %d err %d 401 %d", r.name, c.OK, c.RateLimited, c.Errors, c.Unauthorized))
		}
		st := s.sim.Stats()
		t.Logf("upstream: %s; envoysim retries %d (overflow %d, limit exceeded %d), no healthy upstream %d, upstream local replies %d",
			strings.Join(per, "; "), st.Retries, st.RetryOverflow, st.RetryLimitExceeded, st.NoHealthyUpstream, st.UpstreamImmediateResponses)
		return res
	}
	var policy, policyRPM swarmResult
	t.Run("policy", func(t *testing.T) { policy = runPolicy(t, "swarmgate policy", false) })
	t.Run("policy_key_rpm", func(t *testing.T) { policyRPM = runPolicy(t, "swarmgate policy + key rpm in config", true) })

	var baseline swarmResult
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
		baseline = runSwarm(t, "baseline: 1 key, 1 relay", sim.URL(), relaySecret(r.name, 0), sz)
	})

	t.Logf("%d agents × %d requests (every third streamed), openai-go SDK, bound %v per variant", sz.agents, sz.perAgent, sz.wall)
	t.Log("| variant | requests | completed | p50 ms | p95 ms | p99 ms | 429 to clients | other errors | unanswered | wall |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	t.Log(policy.row())
	t.Log(policyRPM.row())
	t.Log(baseline.row())
	t.Logf("other errors: policy %v; policy + key rpm %v; baseline %v", policy.errs, policyRPM.errs, baseline.errs)
	if policy.total == 0 || baseline.total == 0 {
		t.Fatal("a variant did not run")
	}
	if policy.completion() <= baseline.completion()+0.2 {
		t.Errorf("completion with policy %.1f %% is not clearly above the baseline's %.1f %%", 100*policy.completion(), 100*baseline.completion())
	}
	if policy.rl >= baseline.rl {
		t.Errorf("clients saw %d 429s with the policy, %d without", policy.rl, baseline.rl)
	}
	if policy.completion() < 0.85 {
		t.Errorf("completion with policy %.1f %%, want ≥ 85 %% (capacity is 1.1× the load)", 100*policy.completion())
	}
	// Configured key rpm currently loses requests to 401s (docs/swarm.md,
	// known gaps); it must still beat the baseline.
	if policyRPM.completion() <= baseline.completion() {
		t.Errorf("completion with policy and key rpm %.1f %%, baseline %.1f %%", 100*policyRPM.completion(), 100*baseline.completion())
	}
}
