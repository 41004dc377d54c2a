package swarm

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// fairnessScale is one fairness run: agents split between two tenants
// (weights 3 and 1) against keys far below their demand.
type fairnessScale struct {
	agents, keys, keyRPM int
	run                  time.Duration // agents keep calling until then
	tolerance            float64       // on the weight-3 tenant's share (absolute)
	// returnSlack: an admission counts as after another only when its
	// Admit returned more than this later (overtaken).
	returnSlack time.Duration
}

func fairnessFor() fairnessScale {
	if fullSwarm() {
		// 100 agents (~340 calls/s) against 4 × 600 rpm (admission paces
		// 35/s). Each tenant's waits settle where its demand meets its
		// share: ~1.7 s for gold, ~5.5 s for bronze, both backlogged and
		// within the 10 s wait (a tenant whose requests time out is
		// charged for them in the order: see docs/admission.md).
		return fairnessScale{agents: 100, keys: 4, keyRPM: 600, run: 25 * time.Second, tolerance: 0.05}
	}
	// make test (-race): 30 agents against 2 × 600 rpm (18/s paced). The
	// short run has ~70 admissions in its measured span; it checks the
	// shares more loosely than the full run. Under the race detector, with
	// three replicas, Redis and the agents on two cores, an Admit granted
	// in the shared order may return 100 ms after one granted later (one
	// full make test counted an overtake of 4 that way), so order is
	// judged on returns more than 100 ms apart.
	return fairnessScale{agents: 30, keys: 2, keyRPM: 600, run: 9 * time.Second, tolerance: 0.10, returnSlack: 100 * time.Millisecond}
}

// TestSwarmFairnessAcrossReplicas is issue 20's third "done when": three
// ext_proc replicas (router-level and upstream streams round robin over
// all three) share one admission order in Redis. Two tenants, weights 3
// and 1, both backlogged far beyond the keys' paced rate: between the
// first and last seconds of the run the weight-3 tenant gets 3/4 of the
// admissions (within the scale's tolerance; 5 points in the full run), and
// each tenant's requests are admitted in their arrival order across the
// replicas (FIFO within a tenant).
func TestSwarmFairnessAcrossReplicas(t *testing.T) {
	sc := fairnessFor()
	tenants := []tenantSpec{{name: "gold", key: "sk-swarm-gold", weight: 3}, {name: "bronze", key: "sk-swarm-bronze", weight: 1}}
	const maxWait = 10 * time.Second
	s := startStack(t, stackSpec{
		relays: []relaySpec{{name: "relay-a", keys: sc.keys, keyRPM: sc.keyRPM, ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond,
			mock: mockupstream.Behavior{RPM: sc.keyRPM, Window: time.Second}}},
		replicas: 3, routerOn: []int{0, 1, 2}, upstreamOn: []int{0, 1, 2},
		breaker:    "  consecutive_429: 3\n  consecutive_5xx: 3\n  cooldown: 1s\n  max_cooldown: 5s\n  sync_interval: 100ms\n  honour_remaining: true",
		numRetries: 2,
		admission:  fmt.Sprintf("  max_wait: %s\n  pace: true", maxWait),
		tenants:    tenants,
	})
	res := runTasks(t, "two tenants, weights 3:1", s.sim.URL(), taskPlan{agents: sc.agents, perAgent: 1 << 20, open: true,
		think: agentThink, maxWait: maxWait, bound: sc.run, keys: []string{tenants[0].key, tenants[1].key}})
	upReq, up429 := upstreamCounts(s)

	adm := s.waits.admitted()
	if len(adm) == 0 {
		t.Fatal("nothing admitted")
	}
	// Shares while both tenants are backlogged: from 2 s after the first
	// admission (the queues fill) to 1 s before the agents stop.
	from, to := adm[0].at.Add(2*time.Second), adm[0].at.Add(sc.run-3*time.Second)
	count := map[string]int{}
	inSpan := 0
	for _, w := range adm {
		if w.at.Before(from) || w.at.After(to) {
			continue
		}
		count[w.tenant]++
		inSpan++
	}
	share := float64(count["gold"]) / float64(max(inSpan, 1))
	// Order within a tenant: how many of its requests that arrived earlier
	// (by more than 100 ms: arrival and admission are timed around the
	// queue's call, on a box where goroutines wait their turn) each admission
	// overtook. A replica's first waiter may be admitted from the first
	// four places of the shared order (admission's default Lead 3), so up
	// to three; a replica that fell back to its own order (a Redis step
	// over admission.redis_timeout) could overtake any number.
	overtook, worst := overtaken(adm, 100*time.Millisecond, sc.returnSlack)
	orderErrs := counterSum(t, s, "swarmgate_admission_order_errors_total")
	p95, _ := s.waits.waitPct(0.95)
	t.Log("\n" + taskHeader + "\n" + res.row())
	t.Logf("admitted between +2 s and -1 s: gold (weight 3) %d, bronze (weight 1) %d: gold's share %.3f (configured 0.750); "+
		"admissions that overtook an earlier request of their tenant: %d of %d (at most %d places); order steps failed over to a replica's own order: %.0f; "+
		"p95 queue wait %s; upstream %d requests, %d answered 429",
		count["gold"], count["bronze"], share, overtook, len(adm), worst, orderErrs, p95.Round(time.Millisecond), upReq, up429)
	if inSpan < 50 {
		t.Fatalf("only %d admissions in the measured span", inSpan)
	}
	if math.Abs(share-0.75) > sc.tolerance {
		t.Errorf("gold's share %.3f, want 0.75 ± %.2f", share, sc.tolerance)
	}
	if worst > 3 && orderErrs == 0 {
		t.Errorf("an admission overtook %d earlier requests of its tenant with the shared order up, want ≤ 3", worst)
	}
	if res.s5xx > 0 {
		t.Errorf("clients saw %d 5xx: %v", res.s5xx, res.errs)
	}
}

// overtaken counts, over admissions in the order they were made, those
// that went before an earlier-arrived (by more than slack) request of the
// same tenant admitted later (its Admit returning more than returnSlack
// after), and the most such requests one admission overtook.
func overtaken(adm []admissionWait, slack, returnSlack time.Duration) (n, worst int) {
	for i, w := range adm {
		k := 0
		for _, later := range adm[i+1:] {
			if later.tenant == w.tenant && later.arrival.Before(w.arrival.Add(-slack)) && later.at.After(w.at.Add(returnSlack)) {
				k++
			}
		}
		if k > 0 {
			n++
			worst = max(worst, k)
		}
	}
	return n, worst
}

// counterSum adds a counter over every replica's registry.
func counterSum(t *testing.T, s *stack, name string) float64 {
	t.Helper()
	var sum float64
	for _, reg := range s.regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
