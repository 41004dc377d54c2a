package swarm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// capacityScale is one run at capacity: agents against keys whose paced
// rate is about their nominal demand.
type capacityScale struct {
	agents, perAgent int
	keys, keyRPM     int
	thinkMin, spread time.Duration
}

// demand is the agents' nominal calls per second: one call per think time
// (on average thinkMin + spread/2) plus ~50 ms for the answer.
func (c capacityScale) demand() float64 {
	return float64(c.agents) / (c.thinkMin + c.spread/2 + 50*time.Millisecond).Seconds()
}

// paced is the rate admission paces the keys to (keypool's admission
// share, 92 %, of their rpm; each key's own pace is at 95 %).
func (c capacityScale) paced() float64 { return 0.92 * float64(c.keys*c.keyRPM) / 60 }

func capacityScales() []capacityScale {
	if fullSwarm() {
		// Think 2-3 s: 100 agents ask ~39 calls/s, 500 ~196/s; paced
		// 44/s and 206/s. Key rpm are whole requests per second (the
		// relays' 1 s windows).
		return []capacityScale{
			{agents: 100, perAgent: 4, keys: 8, keyRPM: 360, thinkMin: 2 * time.Second, spread: time.Second},
			{agents: 500, perAgent: 4, keys: 8, keyRPM: 1680, thinkMin: 2 * time.Second, spread: time.Second},
		}
	}
	// make test (-race, 2 shared cores): 20 agents, ~24 calls/s, paced 26/s.
	return []capacityScale{{agents: 20, perAgent: 3, keys: 2, keyRPM: 840, thinkMin: 600 * time.Millisecond, spread: 400 * time.Millisecond}}
}

// TestSwarmAtCapacity is issue 20's second "done when": 100 and 500 agents
// (SWARMGATE_SWARM_FULL=1; a 20-agent run by default) against one relay
// whose keys' paced rate is sized for the agents' demand, per-key limits
// enforced in one-second windows, three ext_proc replicas, the admission
// queue paced (max_wait 10 s). Every agent starts at once, so the first
// seconds are a burst the queue absorbs. At least 99.5 % of tasks must
// complete, with no client 5xx; the p95 queue wait (every admitted
// request, 0 for those admitted at once) is reported.
func TestSwarmAtCapacity(t *testing.T) {
	const maxWait = 10 * time.Second
	for _, sc := range capacityScales() {
		t.Run(fmt.Sprintf("agents=%d", sc.agents), func(t *testing.T) {
			spec := sc.spec(maxWait)
			s := startStack(t, spec)
			res := runTasks(t, fmt.Sprintf("%d agents, paced capacity %.0f/s for a demand of %.0f/s", sc.agents, sc.paced(), sc.demand()),
				s.sim.URL(), sc.plan(maxWait))
			upReq, up429 := upstreamCounts(s)
			p95, n := s.waits.waitPct(0.95)
			p50, _ := s.waits.waitPct(0.50)
			pw, po := paceWaits(t, s.regs)
			var b strings.Builder
			b.WriteString(taskHeader + "\n" + res.row() + "\n")
			t.Log("\n" + b.String())
			t.Logf("queue wait of %d admitted requests: p50 %s, p95 %s; picks that waited for a key's pace: %d, went on without a slot: %d",
				n, p50.Round(time.Millisecond), p95.Round(time.Millisecond), pw, po)
			t.Logf("upstream %d requests, %d answered 429 (%.2f %%); errors %v; final 429s by code %v", upReq, up429,
				100*float64(up429)/float64(max(upReq, 1)), res.errs, res.rlCodes)
			if res.s5xx > 0 || res.other > 0 {
				t.Errorf("clients saw %d 5xx and %d other errors: %v", res.s5xx, res.other, res.errs)
			}
			if c := res.completion(); c < 0.995 {
				t.Errorf("%d of %d tasks completed (%.1f %%), want ≥ 99.5 %%", res.ok, res.tasks, 100*c)
			}
			if !fullSwarm() {
				return
			}
			// The baseline, reported only: the same stack without the
			// queue, agents giving up on a 429.
			spec.admission = "  max_wait: 0\n  pace: false"
			s = startStack(t, spec)
			base := runTasks(t, fmt.Sprintf("%d agents, no queue", sc.agents), s.sim.URL(), sc.plan(maxWait))
			upReq, up429 = upstreamCounts(s)
			t.Log("\n" + taskHeader + "\n" + base.row())
			t.Logf("no queue: upstream %d requests, %d answered 429; final 429s by code %v", upReq, up429, base.rlCodes)
		})
	}
}

// spec is the stack at this scale: one relay whose keys' limits are
// enforced in one-second windows, three ext_proc replicas on envoysim,
// the admission queue paced with max_wait.
func (c capacityScale) spec(maxWait time.Duration) stackSpec {
	return stackSpec{
		relays: []relaySpec{{name: "relay-a", keys: c.keys, keyRPM: c.keyRPM, ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: c.keyRPM, Window: time.Second}}},
		replicas: 3, routerOn: []int{0, 1, 2}, upstreamOn: []int{0, 1, 2},
		breaker:    "  consecutive_429: 3\n  consecutive_5xx: 3\n  cooldown: 1s\n  max_cooldown: 5s\n  sync_interval: 100ms\n  honour_remaining: true",
		numRetries: 2,
		admission:  fmt.Sprintf("  max_wait: %s\n  pace: true", maxWait),
	}
}

func (c capacityScale) think(a, j int) time.Duration {
	return c.thinkMin + time.Duration((a*37+j*61)%100)*c.spread/100
}

// plan is the agents at this scale: every one starts at once, tasks
// refused with a 429 are not retried.
func (c capacityScale) plan(maxWait time.Duration) taskPlan {
	return taskPlan{agents: c.agents, perAgent: c.perAgent, think: c.think, maxWait: maxWait,
		bound: time.Duration(c.perAgent)*(maxWait+c.thinkMin+c.spread) + 10*time.Second, keys: []string{agentKey}}
}

// TestSwarmAtCapacityOnEnvoy runs TestSwarmAtCapacity's scales through the
// real Envoy (newest release): one swarmgate process, so one admission
// queue where the envoysim run has three replicas. Completion and 429s
// are reported (docs/swarm.md); asserted is what holds on any machine:
// every task answered by the bound, nothing but successes, 429s and 5xx,
// and the clients, the relay and the ledger agreeing exactly.
func TestSwarmAtCapacityOnEnvoy(t *testing.T) {
	const maxWait = 10 * time.Second
	rel := envoytest.Newest(t)
	for _, sc := range capacityScales() {
		t.Run(fmt.Sprintf("envoy-%s/agents=%d", rel.Version, sc.agents), func(t *testing.T) {
			s := startEnvoyStack(t, sc.spec(maxWait), rel)
			res := runTasks(t, fmt.Sprintf("Envoy %s, %d agents, paced capacity %.0f/s for a demand of %.0f/s", rel.Version, sc.agents, sc.paced(), sc.demand()),
				s.url, sc.plan(maxWait))
			up, led := checkAccounts(t, res.name, res.ok, s.relays, s.ledger, s.cfg)
			t.Log("\n" + taskHeader + "\n" + res.row())
			t.Logf("upstream %d requests, %d answered 429 (%.2f %%); errors %v; final 429s by code %v; ledger %s", up.Requests, up.RateLimited,
				100*float64(up.RateLimited)/float64(max(up.Requests, 1)), res.errs, res.rlCodes, led)
			if res.u > 0 || res.other > 0 {
				t.Errorf("%d tasks unanswered by the bound, %d other errors: %v", res.u, res.other, res.errs)
			}
			if res.ok == 0 {
				t.Errorf("no task completed of %d", res.tasks)
			}
		})
	}
}

// paceWaits sums, over the replicas' key-pool registries, the picks that
// waited for a key's pace slot and those that went on without one.
func paceWaits(t *testing.T, regs []*prometheus.Registry) (waited, overflow uint64) {
	t.Helper()
	w, o := paceWaitsBy(t, regs)
	for _, n := range w {
		waited += n
	}
	for _, n := range o {
		overflow += n
	}
	return waited, overflow
}

// paceWaitsBy is paceWaits per backend.
func paceWaitsBy(t *testing.T, regs []*prometheus.Registry) (waited, overflow map[string]uint64) {
	t.Helper()
	waited, overflow = map[string]uint64{}, map[string]uint64{}
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "swarmgate_keypool_pace_wait_seconds":
					waited[label(m, "backend")] += histCount(m)
				case "swarmgate_keypool_pace_overflow_total":
					overflow[label(m, "backend")] += uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return waited, overflow
}

// label is m's value of label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histCount(m *dto.Metric) uint64 { return m.GetHistogram().GetSampleCount() }
