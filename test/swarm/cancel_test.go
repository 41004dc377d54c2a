package swarm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/metricstest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// Agents that give up on their calls (a planner cancelling its workers,
// client timeouts, a deploy draining) end both ext_proc streams of every
// such request without response headers; the router-level stream runs on
// replica 0 and the attempts on replicas 1 and 2, so each cancel reaches
// the attempt's replica through Redis. That is not the keys' failure:
// however many agents cancel at once, the relay's keys stay closed,
// nothing fails over, and the next requests go through on priority 0. A
// few such cancels used to open every key of the relay (each counted as a
// reset), refusing all traffic for the cooldown.
func TestSwarmCancelsDoNotOpenKeys(t *testing.T) {
	spec := faultSpec(30 * time.Second)
	// The router-level stream's cancel reaches the attempt's replica
	// through Redis; reset_grace is how long that replica waits for it
	// before it counts a reset. The default (250 ms) is sized for an
	// unloaded replica; on a loaded 2-core runner a -race build delivers
	// it later, so the grace here covers the delivery and the test
	// asserts the verdict, not the machine's speed.
	spec.breaker += "\n  reset_grace: 10s"
	s := startStack(t, spec)
	ctx := testCtx(t, 3*time.Minute)
	requireAllOK(t, "warm-up", load(ctx, s, "warm", 4, 2))
	a, b := s.relay("relay-a"), s.relay("relay-b")
	a.SetDefaultBehavior(mockupstream.Behavior{Latency: 5 * time.Minute}) // the model is slow: agents give up first
	a.ResetRecords()
	b.ResetRecords()

	// Each round, every agent starts a call and gives up once all of the
	// round's calls have reached relay-a (not after a fixed time, which a
	// loaded machine may not reach the relay within): each cancel then
	// ends an attempt that left Envoy with a key.
	const agents, rounds = 24, 3
	var answered atomic.Int64
	for round := range rounds {
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range agents {
			wg.Go(func() {
				c := sdkClient(s.sim.URL(), agentKey, s.http)
				_, err := c.Chat.Completions.New(rctx, openai.ChatCompletionNewParams{Model: model,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Plan the next step.")}},
					option.WithHeader("x-request-id", fmt.Sprintf("gone-%d-%d", w, round)))
				if err == nil {
					answered.Add(1)
				}
			})
		}
		want := (round + 1) * agents
		waitUntil(t, fmt.Sprintf("round %d's %d calls at relay-a", round, agents), 90*time.Second, func() bool {
			return a.Total().Requests >= want || b.Total().Requests > 0
		})
		cancel()
		wg.Wait()
	}
	if n := answered.Load(); n != 0 {
		t.Fatalf("%d calls answered although relay-a never answers: relay-a was failed over to relay-b", n)
	}
	if got := b.Total().Requests; got != 0 {
		t.Fatalf("relay-b (priority 1) got %d requests while relay-a's keys should be closed", got)
	}
	attempts := 0
	for w := range agents {
		for round := range rounds {
			rec, _ := waitRecord(t, s.sim, fmt.Sprintf("gone-%d-%d", w, round))
			attempts += len(rec.Attempts)
		}
	}
	// Every call reached relay-a before it was cancelled, exactly once.
	if got := a.Total().Requests; attempts != agents*rounds || got != agents*rounds {
		t.Fatalf("%d upstream attempts (relay-a counted %d) for %d cancelled calls: want one each", attempts, got, agents*rounds)
	}
	// Every attempt gets its verdict on the replica that ran it.
	var reset, cancelled float64
	waitUntil(t, "a verdict for every cancelled attempt", time.Minute, func() bool {
		reset, cancelled = 0, 0
		for _, reg := range s.regs[1:] {
			r, err1 := metricstest.Sum(reg, "swarmgate_keypool_unanswered_total", map[string]string{"verdict": "reset"})
			c, err2 := metricstest.Sum(reg, "swarmgate_keypool_unanswered_total", map[string]string{"verdict": "cancelled"})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			reset += r
			cancelled += c
		}
		return int(reset+cancelled) >= attempts
	})
	t.Logf("%d cancelled calls, %d attempts: %v verdicts cancelled, %v reset", agents*rounds, attempts, cancelled, reset)
	if reset != 0 {
		t.Errorf("%v attempts of cancelled calls counted as resets against their keys", reset)
	}
	for i, p := range s.pools {
		for k := range 2 {
			if st := keyState(p, "relay-a", relayKeyID("relay-a", k)); st != "closed" {
				t.Errorf("replica %d: %s is %s after the agents cancelled", i, relayKeyID("relay-a", k), st)
			}
		}
	}

	a.SetDefaultBehavior(mockupstream.Behavior{})
	rs := load(ctx, s, "after", 10, 2)
	requireAllOK(t, "after the cancels", rs)
	for i := range rs {
		rec, _ := waitRecord(t, s.sim, fmt.Sprintf("after-%d", i))
		if len(rec.Attempts) != 1 || rec.Attempts[0].Priority != 0 {
			t.Errorf("after-%d: attempts %+v, want one on relay-a (priority 0)", i, rec.Attempts)
		}
	}
}
