package keypool

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestPruneRemovedKeys: a key's shared state (breaker, learned limits,
// refused share, pace slot) is stamped when written; a day after its last
// write, once the config no longer has the key, a prune removes every
// field of it and nothing of the keys still configured, whose stamps are
// renewed. Before the day is over nothing goes.
func TestPruneRemovedKeys(t *testing.T) {
	for _, tc := range []struct {
		name      string
		after     time.Duration
		removed   bool // the reload dropped key b2
		wantGone  bool
		wantStamp bool // b2 still stamped after the prune
	}{
		{"removed, a day later: pruned", 25 * time.Hour, true, true, false},
		{"removed, within the day: kept", 23 * time.Hour, true, false, true},
		{"still configured: kept and stamped again", 25 * time.Hour, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client()
			ctx := t.Context()
			clk := newFakeClock()
			both := testConfig(t, "", map[string][]key{"b": {{id: "b1"}, {id: "b2"}}})
			p := newPools(t, both, Options{Redis: rdb, Clock: clk, ReplicaID: "r1"})
			s := p.sync
			var ops []syncOp
			for _, k := range []string{"b1", "b2"} {
				ops = append(ops,
					syncOp{backend: "b", key: k, state: &remoteState{Open: true, Reason: "429", Until: clk.Now().Add(time.Minute), Trips: 1, At: clk.Now()}},
					syncOp{backend: "b", key: k, limits: encodeLimits(600, 0, 0)},
					syncOp{backend: "b", key: k, refused: "0.5000"})
				rdb.HSet(ctx, paceHashKey(s.prefix, "b"), k, "1")
			}
			s.write(ctx, ops)
			if tc.removed {
				p.SetConfig(testConfig(t, "", map[string][]key{"b": {{id: "b1"}}}))
			}
			clk.Advance(tc.after)
			s.prune(ctx)

			has := func(hash, field string) bool {
				ok, err := rdb.HExists(ctx, hash, field).Result()
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			for _, k := range []string{"b1", "b2"} {
				gone := tc.wantGone && k == "b2"
				for _, f := range []struct{ hash, field string }{
					{s.hashKey, k}, {s.limitsKey, "b|" + k}, {s.refusedKey, "b|" + k}, {paceHashKey(s.prefix, "b"), k},
				} {
					if present := has(f.hash, f.field); present == gone {
						t.Errorf("%s %s: present %v, want %v", f.hash, f.field, present, !gone)
					}
				}
			}
			score, err := rdb.ZScore(ctx, s.writtenKey, "b|b2").Result()
			if stamped := err == nil; stamped != tc.wantStamp {
				t.Errorf("b|b2 stamped %v (score %v), want %v", stamped, score, tc.wantStamp)
			}
			if b1, err := rdb.ZScore(ctx, s.writtenKey, "b|b1").Result(); err != nil ||
				(tc.after > staleAfter && int64(b1) != clk.Now().UnixMilli()) {
				t.Errorf("b|b1 stamp %v (err %v): a configured key is stamped again when looked at", b1, err)
			}
		})
	}
}
