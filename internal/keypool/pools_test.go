package keypool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// leaveOn cancels the pick's context when one of cmds is sent to Redis: a
// client that goes away during that round trip.
type leaveOn struct {
	cmds   []string
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (h *leaveOn) set(cancel context.CancelFunc) {
	h.mu.Lock()
	h.cancel = cancel
	h.mu.Unlock()
}

func (h *leaveOn) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *leaveOn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(h.cmds, cmd.Name()) {
			h.mu.Lock()
			if h.cancel != nil {
				h.cancel()
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *leaveOn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPickCallerLeaves: a client that goes away while its pick waits on
// Redis (the key's pace slot, a retry's tried set) or on the shared
// limiter gets no lease, and the pick gives back what it reserved: the
// key's in-flight slot (max_in_flight 1 here), a half-open key's probe,
// its pick count. Before, the cut round trip read as "no answer", the
// lease was handed out, nobody used or freed it, and the slot stayed
// taken until the lease expired (probeTTL for a probe). A limiter call cut
// by the caller does not turn the limiter off for the replica either.
func TestPickCallerLeaves(t *testing.T) {
	const breaker = "breaker: {consecutive_5xx: 2, cooldown: 1s, max_cooldown: 1m, jitter: 0.000001}\n"
	for _, tc := range []struct {
		name     string
		extra    string
		attempt  int
		cmds     []string // Redis commands the client leaves during
		limiter  bool     // or the shared limiter's call
		halfOpen bool     // the key was opened on 5xx and its cooldown is over
		booked   bool     // the key was just picked: the pick books its next slot and waits
	}{
		{name: "during the pace slot's EVALSHA", extra: paceYAML, attempt: 1, cmds: []string{"evalsha", "eval"}},
		{name: "during a retry's tried-set read", extra: "redis: {read_timeout: 2s}\n", attempt: 2, cmds: []string{"smembers"}},
		{name: "during a half-open probe's pace slot", extra: paceYAML, attempt: 1, cmds: []string{"evalsha", "eval"}, halfOpen: true},
		{name: "during a half-open probe's tried-set read", extra: "redis: {read_timeout: 2s}\n", attempt: 2, cmds: []string{"smembers"}, halfOpen: true},
		{name: "while waiting for a booked slot", extra: paceYAML, attempt: 1, cmds: []string{"evalsha", "eval"}, booked: true},
		{name: "during the shared limiter's call", attempt: 1, limiter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(t, breaker+tc.extra, map[string][]key{"b": {{id: "a", rpm: 6000, max: 1}}})
			hook := &leaveOn{cmds: tc.cmds}
			opts := Options{Clock: clk}
			if tc.cmds != nil {
				rdb := redistest.Start(t).Client()
				rdb.AddHook(hook)
				opts.Redis = rdb
			}
			var limiterCalls int
			if tc.limiter {
				opts.Limiter = limiterFunc(func(ctx context.Context, _ string, _ int) (bool, time.Duration, error) {
					limiterCalls++
					hook.mu.Lock()
					if hook.cancel != nil {
						hook.cancel()
					}
					hook.mu.Unlock()
					if err := ctx.Err(); err != nil {
						return false, 0, err
					}
					return true, 0, nil
				})
			}
			p := newPools(t, cfg, opts)
			if tc.halfOpen {
				_ = p.Report(t.Context(), "b", "a", "", status(500))
				_ = p.Report(t.Context(), "b", "a", "", status(500))
				clk.Advance(2 * time.Second)
				if st := stateOf(t, p, "a"); st.State != "half-open" {
					t.Fatalf("key %s, want half-open", st.State)
				}
			}

			if tc.booked {
				// 6000 rpm: the next slot is 10.5 ms on, and the fake
				// clock does not move.
				pick(t, p, "b", PickRequest{RequestID: "r0", Attempt: 1}).Done(status(200))
			}
			before := stateOf(t, p, "a")

			ctx, cancel := context.WithCancel(t.Context())
			hook.set(cancel)
			l, err := p.Pick(ctx, "b", PickRequest{RequestID: "r1", Attempt: tc.attempt})
			hook.set(nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("pick of a client that left: lease %s, err %v; want context.Canceled", l.KeyID, err)
			}
			if st := stateOf(t, p, "a"); st.InFlight != 0 || st.Picks != before.Picks {
				t.Fatalf("after the pick the client left: %+v, want nothing in flight or picked", st)
			}

			// The slot (and probe) are free for the next request, which
			// still asks the limiter.
			l, err = p.Pick(t.Context(), "b", PickRequest{RequestID: "r2", Attempt: 1})
			if err != nil {
				t.Fatalf("next pick: %v", err)
			}
			if l.Probe != tc.halfOpen {
				t.Errorf("next pick probe %v, want %v", l.Probe, tc.halfOpen)
			}
			if tc.limiter && limiterCalls != 2 {
				t.Errorf("limiter asked %d times, want 2: a caller leaving turned it off", limiterCalls)
			}
		})
	}
}
