package swarm

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// overloadScale is one over-capacity run. The full run
// (SWARMGATE_SWARM_FULL=1) is issue 20's: 500 agents against keys sized
// for 12; the default run keeps the same shape small so `make test` (with
// -race) stays short.
type overloadScale struct {
	agents, perAgent int
	keyRPM           int // each of the four keys
	maxWait          time.Duration
	bound            time.Duration
}

func overloadFor(t *testing.T) overloadScale {
	if fullSwarm() {
		// An agent calls about every 0.3 s (think 250 ms on average plus
		// the answer), ~3.4 calls/s: 4 keys × 600 rpm = 40 calls/s is
		// the demand of 12 agents.
		return overloadScale{agents: 500, perAgent: 4, keyRPM: 600, maxWait: 10 * time.Second, bound: 90 * time.Second}
	}
	// 40 agents against 4 × 60 rpm (4 calls/s, about one agent's demand).
	return overloadScale{agents: 40, perAgent: 2, keyRPM: 60, maxWait: 2 * time.Second, bound: 20 * time.Second}
}

// agentThink is 200-300 ms, different per agent and task.
func agentThink(a, j int) time.Duration { return time.Duration(200+(a*37+j*61)%100) * time.Millisecond }

// overloadSpec: one relay, four keys with per-key RPM enforced in
// one-second windows as providers quantize them (x-ratelimit-* headers on
// every answer), the fourth key flaky (30 % 503); three ext_proc replicas
// each taking router-level and upstream streams round robin; breakers on
// the providers' 429s and remaining counts; Envoy retries twice.
func overloadSpec(sc overloadScale, admission string) stackSpec {
	return stackSpec{
		relays: []relaySpec{{name: "relay-a", keys: 4, keyRPM: sc.keyRPM, ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: sc.keyRPM, Window: time.Second}}},
		replicas: 3, routerOn: []int{0, 1, 2}, upstreamOn: []int{0, 1, 2},
		breaker:    "  consecutive_429: 3\n  consecutive_5xx: 3\n  cooldown: 1s\n  max_cooldown: 5s\n  sync_interval: 100ms\n  honour_remaining: true",
		numRetries: 2,
		admission:  admission,
	}
}

// flaky makes the fourth key fail 30 % of its calls with 503.
func flaky(s *stack, sc overloadScale) {
	s.relay("relay-a").SetBehavior(relayKeyID("relay-a", 3), mockupstream.Behavior{RPM: sc.keyRPM, Window: time.Second,
		FailProbability: 0.3, FailAction: mockupstream.ActError, Status: 503})
}

// upstreamCounts sums the relay's answers.
func upstreamCounts(s *stack) (requests, rateLimited int) {
	c := s.relay("relay-a").Total()
	return c.Requests, c.RateLimited
}

// TestSwarmOverCapacity is issue 20's first "done when": agents far beyond
// what the keys can serve, one key flaky. Three variants on the same
// stack shape: the admission queue (paced to the keys, max_wait W);
// swarmgate without queueing, agents giving up on a 429 as SDKs do after
// their quick retries; and without queueing with every agent retrying
// with exponential back-off honouring Retry-After for the same W.
func TestSwarmOverCapacity(t *testing.T) {
	sc := overloadFor(t)
	plan := taskPlan{agents: sc.agents, perAgent: sc.perAgent, think: agentThink, maxWait: sc.maxWait, bound: sc.bound, keys: []string{agentKey}}
	type run struct {
		res           *taskResult
		upReq, up429  int
		queuedMaxSeen int
	}
	variant := func(t *testing.T, name, admission string, retry bool) run {
		s := startStack(t, overloadSpec(sc, admission))
		flaky(s, sc)
		pl := plan
		pl.retry = retry
		var r run
		r.res = runTasks(t, name, s.sim.URL(), pl)
		r.upReq, r.up429 = upstreamCounts(s)
		t.Logf("%s: upstream %d requests, %d answered 429 (%.2f %%); errors %v", name, r.upReq, r.up429,
			100*float64(r.up429)/float64(max(r.upReq, 1)), r.res.errs)
		if !strings.Contains(admission, "max_wait: 0") {
			p95, n := s.waits.waitPct(0.95)
			pw, po := paceWaits(t, s.regs)
			t.Logf("%s: p95 queue wait of %d admitted %s; picks that waited for a key's pace %d, went on without a slot %d; order errors %.0f",
				name, n, p95.Round(time.Millisecond), pw, po, counterSum(t, s, "swarmgate_admission_order_errors_total"))
		}
		return r
	}
	queueYAML := fmt.Sprintf("  max_wait: %s\n  pace: true", sc.maxWait)
	var queued, plain, retrying run
	t.Run("queue", func(t *testing.T) {
		queued = variant(t, "queue (paced, max_wait "+sc.maxWait.String()+")", queueYAML, false)
	})
	const offYAML = "  max_wait: 0\n  pace: false"
	t.Run("no_queue", func(t *testing.T) { plain = variant(t, "no queue, agents give up on 429", offYAML, false) })
	t.Run("client_retry", func(t *testing.T) {
		retrying = variant(t, "no queue, agents retry (back-off, Retry-After) within "+sc.maxWait.String(), offYAML, true)
	})
	if queued.res == nil || plain.res == nil || retrying.res == nil {
		t.Fatal("a variant did not run")
	}

	t.Logf("%d agents × %d tasks, 4 keys × %d rpm in 1 s windows (one flaky, 30 %% 503), think 200-300 ms, max wait %s",
		sc.agents, sc.perAgent, sc.keyRPM, sc.maxWait)
	var b strings.Builder
	b.WriteString(taskHeader + "\n")
	for _, r := range []run{queued, plain, retrying} {
		b.WriteString(r.res.row() + "\n")
	}
	t.Log("\n" + b.String())
	t.Logf("completed: queue / no queue = %.1fx; queue / client retry = %.2fx", float64(queued.res.ok)/float64(max(plain.res.ok, 1)),
		float64(queued.res.ok)/float64(max(retrying.res.ok, 1)))

	q := queued.res
	if q.s5xx > 0 || q.other > 0 {
		t.Errorf("with the queue clients saw %d 5xx and %d other errors: %v", q.s5xx, q.other, q.errs)
	}
	// Every wait ends within its bound: a refused call by max_wait plus
	// the harness's own slack, a served one by max_wait plus the answer.
	if slack := 2 * time.Second; q.slowestRefusal > sc.maxWait+slack || q.slowestCall > sc.maxWait+slack+time.Second {
		t.Errorf("slowest refusal %s, slowest call %s: beyond max_wait %s", q.slowestRefusal, q.slowestCall, sc.maxWait)
	}
	if q.ok <= plain.res.ok {
		t.Errorf("the queue completed %d tasks, without it %d", q.ok, plain.res.ok)
	}
	if !fullSwarm() {
		// The short run (make test, -race, 2 shared cores) is too small
		// and too noisy for the ratios; it checks the properties
		// above. The full run holds the product to the targets
		// (docs/admission.md lists which are not met yet).
		return
	}
	if share := float64(queued.up429) / float64(max(queued.upReq, 1)); share >= 0.01 {
		t.Errorf("upstream 429s with the queue: %d of %d (%.2f %%), want < 1 %%", queued.up429, queued.upReq, 100*share)
	}
	if q.ok <= retrying.res.ok {
		t.Errorf("the queue completed %d tasks, agents retrying %d", q.ok, retrying.res.ok)
	}
	if min := 5 * plain.res.ok; q.ok < min {
		t.Errorf("the queue completed %d tasks, without it %d: want ≥ 5x", q.ok, plain.res.ok)
	}
}

// fullSwarm reports whether this is the full swarm run (make swarm).
func fullSwarm() bool { return os.Getenv("SWARMGATE_SWARM_FULL") == "1" && !testing.Short() }
