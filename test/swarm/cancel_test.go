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
	"github.com/swarmgate/swarmgate/mockupstream"
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
	s := startStack(t, faultSpec(30*time.Second))
	ctx := testCtx(t, 60*time.Second)
	requireAllOK(t, "warm-up", load(ctx, s, "warm", 4, 2))
	a := s.relay("relay-a")
	a.SetDefaultBehavior(mockupstream.Behavior{Latency: 20 * time.Second}) // the model is slow: agents give up first

	const agents, each = 24, 3
	var answered atomic.Int64
	var wg sync.WaitGroup
	for w := range agents {
		wg.Go(func() {
			c := sdkClient(s.sim.URL(), agentKey, s.http)
			for i := range each {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, err := c.Chat.Completions.New(cctx, openai.ChatCompletionNewParams{Model: model,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Plan the next step.")}},
					option.WithHeader("x-request-id", fmt.Sprintf("gone-%d-%d", w, i)))
				cancel()
				if err == nil {
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := answered.Load(); n != 0 {
		t.Fatalf("%d calls answered within 300ms although relay-a takes 20s: relay-a was failed over to relay-b", n)
	}
	attempts := 0
	for w := range agents {
		for i := range each {
			rec, _ := waitRecord(t, s.sim, fmt.Sprintf("gone-%d-%d", w, i))
			attempts += len(rec.Attempts)
		}
	}
	// A call cancelled before its attempt left (slow -race runs) has none.
	if attempts < agents*each/2 || attempts > agents*each {
		t.Fatalf("%d upstream attempts for %d cancelled calls: most should have reached relay-a, once", attempts, agents*each)
	}
	// Every attempt gets its verdict on the replica that ran it.
	var reset, cancelled float64
	waitUntil(t, "a verdict for every cancelled attempt", 10*time.Second, func() bool {
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
	t.Logf("%d cancelled calls, %d attempts: %v verdicts cancelled, %v reset", agents*each, attempts, cancelled, reset)
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
