package keypool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

const paceYAML = "admission: {max_wait: 2s, pace: true}\nredis: {read_timeout: 2s, dial_timeout: 2s}\n"

// paceReplicas starts n Pools sharing one real redis-server, with Redis
// timeouts long enough that a loaded box does not turn a slot Redis
// refused into this replica's own claim (the fallback).
func paceReplicas(t *testing.T, srv *redistest.Server, cfg *config.Config, n int) []*Pools {
	t.Helper()
	ps := make([]*Pools, n)
	for i := range ps {
		ps[i] = newPools(t, cfg, Options{Redis: srv.Client(), ReplicaID: fmt.Sprintf("r%d", i)})
		run(t, ps[i])
	}
	return ps
}

// TestKeyPaceLocal: without Redis each key's pace holds per replica. A key
// whose slot is taken is skipped; when every key is paced beyond the
// pick's wait bound the pick goes on as without the pace; keys without a
// known limit, and pools without admission.pace, are not paced.
func TestKeyPaceLocal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		keys  []key
		// advance before each pick, and the key each pick gets
		steps []struct {
			advance time.Duration
			want    string
		}
	}{
		{
			// 6 rpm at 95 %: one pick per 10.5 s per key; a's weight alone
			// would take every pick. a's weight would
			// take every pick without the pace.
			name: "rotates off paced keys", extra: paceYAML, keys: []key{{id: "a", rpm: 6, weight: 100}, {id: "b", rpm: 6}},
			steps: []struct {
				advance time.Duration
				want    string
			}{{0, "a"}, {0, "b"}, {10600 * time.Millisecond, "a"}, {0, "b"}},
		},
		{
			// Both paced past the pick's 1 s bound: the picks go on
			// without a slot, each to the key whose next slot is
			// soonest (a: 6.5 s away, b: 9.5 s), not in rotation.
			name: "past the bound: the soonest slot's key", extra: paceYAML, keys: []key{{id: "a", rpm: 6}, {id: "b", rpm: 6}},
			steps: []struct {
				advance time.Duration
				want    string
			}{{0, "a"}, {3 * time.Second, "b"}, {time.Second, "a"}, {0, "a"}},
		},
		{
			name: "unknown limit is not paced", extra: paceYAML, keys: []key{{id: "a"}},
			steps: []struct {
				advance time.Duration
				want    string
			}{{0, "a"}, {0, "a"}, {0, "a"}},
		},
		{
			name: "pace off", extra: "admission: {pace: false}\nredis: {read_timeout: 200ms}\n", keys: []key{{id: "a", rpm: 6, weight: 100}, {id: "b", rpm: 6}},
			steps: []struct {
				advance time.Duration
				want    string
			}{{0, "a"}, {0, "a"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			p := newPools(t, testConfig(t, tc.extra, map[string][]key{"b": tc.keys}), Options{Clock: clock})
			for i, s := range tc.steps {
				clock.Advance(s.advance)
				l := pick(t, p, "b", PickRequest{Attempt: 1})
				l.Done(status(200))
				if l.KeyID != s.want {
					t.Fatalf("pick %d: key %s, want %s", i, l.KeyID, s.want)
				}
			}
		})
	}
}

// TestKeyPaceAcrossReplicas: the pace is one per key across replicas
// (real redis-server). A slot taken on one replica is refused on the
// others, which pick another key; when every key is paced for longer than
// a pick waits, the pick still returns a key (as without the pace).
func TestKeyPaceAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, paceYAML, map[string][]key{"b": {{id: "a", rpm: 6}, {id: "b", rpm: 6}}})
	ps := paceReplicas(t, srv, cfg, 3)
	seen := map[string]bool{}
	for i := range 2 {
		l := pick(t, ps[i], "b", PickRequest{Attempt: 1})
		l.Done(status(200))
		if seen[l.KeyID] {
			t.Fatalf("replica %d got %s, whose slot replica 0 took", i, l.KeyID)
		}
		seen[l.KeyID] = true
	}
	// Both keys' next slots are 10.5 s away, beyond the 1 s a pick waits.
	start := time.Now()
	l := pick(t, ps[2], "b", PickRequest{Attempt: 1})
	l.Done(status(200))
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("a pick with every slot 10 s away waited %s instead of going on at once", d)
	}
	ok, wait, err := ps[0].sync.takeSlot(context.Background(), "b", "a", time.Second, 0)
	if err != nil || ok || wait <= 9*time.Second || wait > 11*time.Second {
		t.Errorf("slot of a after the picks: ok %v wait %s err %v; want refused for ~10.5 s", ok, wait, err)
	}
}

// TestKeyPaceWaitsForSlot: one key, picks from three replicas at once: each
// waits for the key's next slot instead of overflowing onto it, so the
// slots Redis handed out are one interval apart.
func TestKeyPaceWaitsForSlot(t *testing.T) {
	srv := redistest.Start(t)
	// 240 rpm at 95 %: a slot every 263 ms; three picks fit in the 1 s bound.
	cfg := testConfig(t, paceYAML, map[string][]key{"b": {{id: "a", rpm: 240}}})
	ps := paceReplicas(t, srv, cfg, 3)
	var wg sync.WaitGroup
	start := time.Now()
	took := make([]time.Duration, 3)
	for i, p := range ps {
		wg.Go(func() {
			l := pick(t, p, "b", PickRequest{Attempt: 1})
			took[i] = time.Since(start)
			l.Done(status(200))
		})
	}
	wg.Wait()
	// The last of three picks got the third slot: two intervals after the
	// first (a lower bound on waiting, not a speed goal).
	if last := max(took[0], took[1], took[2]); last < 2*250*time.Millisecond {
		t.Errorf("three picks of a key paced at 263 ms ended by %s: some did not wait for its slot (%v)", last, took)
	}
	ok, _, err := ps[0].sync.takeSlot(context.Background(), "b", "a", time.Second, 0)
	if err != nil || ok {
		t.Errorf("slot right after the third pick: ok %v err %v; want refused", ok, err)
	}
}

// extender records the pick's timer extensions.
type extender struct {
	mu    sync.Mutex
	calls []time.Duration
}

func (e *extender) Extend(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, d)
}

// TestKeyPaceExtendsForSlowKeys: a key paced slower than the pick's short
// bound (60 rpm at 95 %: a slot every 1.05 s, the bound 1 s) is waited for
// when the caller can extend its timer (the upstream filter's
// override_message_timeout), which the pick does once, with what is left
// of the long bound plus message_timeout; without it the pick goes on
// without a slot, as before.
func TestKeyPaceExtendsForSlowKeys(t *testing.T) {
	for _, tc := range []struct {
		name       string
		extend     bool
		wantWaited bool
	}{
		{"extends and waits", true, true},
		{"no extension: goes on without a slot", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := testConfig(t, paceYAML, map[string][]key{"b": {{id: "a", rpm: 60}}})
			p := paceReplicas(t, srv, cfg, 1)[0]
			pick(t, p, "b", PickRequest{Attempt: 1}).Done(status(200))
			var e extender
			req := PickRequest{Attempt: 1}
			if tc.extend {
				req.Extend = &e
			}
			start := time.Now()
			l := pick(t, p, "b", req)
			took := time.Since(start)
			l.Done(status(200))
			if waited := took >= time.Second; waited != tc.wantWaited {
				t.Fatalf("second pick took %s; want waited for the 1.05 s slot: %v", took, tc.wantWaited)
			}
			_, long := cfg.KeySlotWait()
			switch {
			case tc.extend && (len(e.calls) != 1 || e.calls[0] <= long || e.calls[0] > long+cfg.Request.MessageTimeout.Duration):
				t.Errorf("extensions %v; want one, within the long bound %s plus message_timeout", e.calls, long)
			case !tc.extend && len(e.calls) != 0:
				t.Errorf("extensions %v without an extender", e.calls)
			}
		})
	}
}

// TestKeyPaceBooksDrainedKey: a paced key whose provider said with its
// answer that no request remains until its window resets is booked for
// that reset, not refused: the second of two calls on a key of one a
// second, picked just after the first's answer, waits for the room the
// provider named (the later of that and the pace's slot, also when Redis
// books the pace's earlier one). Before, it was refused at once with
// every key "rate limited or busy".
func TestKeyPaceBooksDrainedKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		redis    bool
		reset    time.Duration
		wantWait time.Duration // lower bound on the second pick's wait
	}{
		{"reset before the pace slot, Redis", true, time.Second, time.Second},
		{"reset after the pace slot, Redis", true, 1500 * time.Millisecond, 1450 * time.Millisecond},
		{"reset after the pace slot, local", false, 1500 * time.Millisecond, 1450 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, paceYAML, map[string][]key{"b": {{id: "a", rpm: 60}}})
			var p *Pools
			if tc.redis {
				p = paceReplicas(t, redistest.Start(t), cfg, 1)[0]
			} else {
				p = newPools(t, cfg, Options{})
			}
			o := status(200)
			o.RemainingRequests, o.ResetRequests = 0, tc.reset
			pick(t, p, "b", PickRequest{Attempt: 1}).Done(o)
			var e extender
			start := time.Now()
			l, err := p.Pick(context.Background(), "b", PickRequest{Attempt: 1, Extend: &e})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("second pick: %v; want key a at its provider's reset", err)
			}
			l.Done(status(200))
			if took < tc.wantWait {
				t.Fatalf("second pick took %s; want at least %s (the provider's reset %s)", took, tc.wantWait, tc.reset)
			}
			if len(e.calls) != 1 {
				t.Errorf("extensions %v; want one", e.calls)
			}
		})
	}
}
