package keypool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// replicas starts n Pools sharing one real redis-server.
func replicas(t *testing.T, srv *redistest.Server, cfg *config.Config, n int) []*Pools {
	t.Helper()
	ps := make([]*Pools, n)
	for i := range ps {
		ps[i] = newPools(t, cfg, Options{Redis: redisClient(t, srv.Addr), ReplicaID: fmt.Sprintf("r%d", i)})
		run(t, ps[i])
	}
	return ps
}

func syncConfig(t *testing.T, syncInterval time.Duration, extra string) *config.Config {
	return testConfig(t, breakerYAML(time.Minute, time.Hour, syncInterval, 0, false)+
		"redis: {read_timeout: 200ms, dial_timeout: 200ms}\n"+extra,
		map[string][]key{"b": {{id: "a"}, {id: "b"}, {id: "c"}}})
}

func trip(t *testing.T, p *Pools, keyID string) {
	t.Helper()
	for range 3 {
		if err := p.Report(t.Context(), "b", keyID, "", status(429)); err != nil {
			t.Fatal(err)
		}
	}
	if s := stateOf(t, p, keyID); s.State != "open" {
		t.Fatalf("%s not open on its own replica: %+v", keyID, s)
	}
}

// skips reports whether p avoids keyID in the next picks.
func skips(t *testing.T, p *Pools, keyID string) bool {
	for range 6 {
		l, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		l.Done(status(200))
		if l.KeyID == keyID {
			return false
		}
	}
	return true
}

func TestTripReachesOtherReplicas(t *testing.T) {
	srv := redistest.Start(t)
	const syncInterval = 200 * time.Millisecond
	ps := replicas(t, srv, syncConfig(t, syncInterval, ""), 3)
	// Wait until every subscriber is attached.
	waitFor(t, 5*time.Second, "subscribers", func() bool {
		n, _ := srv.Client().PubSubNumSub(t.Context(), "sg:keypool:events").Result()
		return n["sg:keypool:events"] == 3
	})

	t.Run("pubsub", func(t *testing.T) {
		start := time.Now()
		trip(t, ps[0], "a")
		for i, p := range ps[1:] {
			lag := waitFor(t, syncInterval+200*time.Millisecond, fmt.Sprintf("replica %d skips a", i+1), func() bool { return stateOf(t, p, "a").State == "open" })
			if !skips(t, p, "a") {
				t.Fatalf("replica %d still picks a", i+1)
			}
			t.Logf("replica %d: trip adopted after %s (bound sync_interval %s + read_timeout)", i+1, lag, syncInterval)
		}
		t.Logf("all replicas skip a %s after the trip", time.Since(start))
		for i, p := range ps[1:] {
			// Counted just after the state change; normally by pub/sub, by
			// the poll if it read the hash first.
			var h *dto.Histogram
			waitFor(t, time.Second, "adoption counted", func() bool {
				n := uint64(0)
				for _, path := range []string{"pubsub", "poll"} {
					var m dto.Metric
					_ = p.metrics.lag.WithLabelValues(path).(prometheus.Metric).Write(&m)
					if c := m.GetHistogram().GetSampleCount(); c > 0 {
						n += c
						h = m.GetHistogram()
					}
				}
				return n == 1
			})
			t.Logf("replica %d: propagation lag (origin transition -> adopted) %s", i+1,
				time.Duration(h.GetSampleSum()*float64(time.Second)).Round(time.Microsecond))
		}
	})

	t.Run("poll backstop", func(t *testing.T) {
		// A transition whose PUBLISH was lost (subscriber reconnecting):
		// written to the hash only. The poll must find it within
		// sync_interval + read_timeout (the stated bound).
		rs := remoteState{Open: true, Reason: ReasonFailures, Until: time.Now().Add(time.Minute), Trips: 1, At: time.Now()}
		if err := srv.Client().HSet(t.Context(), "sg:keypool:breakers", "b", encodeState("elsewhere", "b", "b", rs)).Err(); err != nil {
			t.Fatal(err)
		}
		for i, p := range ps {
			lag := waitFor(t, syncInterval+200*time.Millisecond, fmt.Sprintf("replica %d polls b", i), func() bool { return stateOf(t, p, "b").State == "open" })
			t.Logf("replica %d: hash-only transition adopted after %s", i, lag)
		}
	})

	t.Run("probe success closes everywhere", func(t *testing.T) {
		// Key c is open everywhere for a moment; then replica 1 probes it
		// and succeeds.
		rs := remoteState{Open: true, Reason: ReasonFailures, Until: time.Now().Add(30 * time.Millisecond), Trips: 1, At: time.Now()}
		for _, p := range ps {
			p.pool("b").adopt("c", rs)
		}
		waitFor(t, time.Second, "c half-open", func() bool { return stateOf(t, ps[1], "c").State == "half-open" })
		_ = ps[1].Report(t.Context(), "b", "c", "", status(200))
		if s := stateOf(t, ps[1], "c"); s.State != "closed" {
			t.Fatalf("prober: %+v", s)
		}
		for i, p := range []*Pools{ps[0], ps[2]} {
			waitFor(t, syncInterval, fmt.Sprintf("replica %d closes c", i), func() bool { return stateOf(t, p, "c").State == "closed" })
		}
	})
}

func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	const syncInterval = 100 * time.Millisecond
	cfg := syncConfig(t, syncInterval, "")
	ps := replicas(t, srv, cfg, 2)
	waitFor(t, 5*time.Second, "subscribers", func() bool {
		n, _ := srv.Client().PubSubNumSub(t.Context(), "sg:keypool:events").Result()
		return n["sg:keypool:events"] == 2
	})
	srv.Stop()

	// Picks keep working; retries (which read Redis) are bounded by the
	// read timeout, and skip Redis once it is known down.
	var worst time.Duration
	for i := range 50 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		l, err := ps[0].Pick(ctx, "b", PickRequest{RequestID: fmt.Sprint("down-", i), Attempt: 2})
		cancel()
		if err != nil {
			t.Fatalf("pick with Redis down: %v", err)
		}
		l.Done(status(200))
		worst = max(worst, time.Since(start))
	}
	if worst > cfg.Redis.ReadTimeout.D()+100*time.Millisecond {
		t.Fatalf("slowest pick with Redis down: %s (read timeout %s)", worst, cfg.Redis.ReadTimeout.D())
	}
	t.Logf("slowest pick with Redis down: %s", worst)

	// A trip during the outage stays local, and reporting never waits
	// for Redis (writes are queued)...
	start := time.Now()
	trip(t, ps[0], "c")
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("three reports took %s with Redis down", d)
	}
	if stateOf(t, ps[1], "c").State != "closed" {
		t.Fatal("trip crossed replicas without Redis")
	}
	// ...and reaches the other replica once Redis is back (empty: a
	// restart loses data).
	srv.Restart()
	lag := waitFor(t, 5*time.Second, "replica 1 learns the outage trip", func() bool { return stateOf(t, ps[1], "c").State == "open" })
	t.Logf("outage trip propagated %s after Redis restart", lag)

	// And live sync works again.
	trip(t, ps[1], "b")
	waitFor(t, 5*time.Second, "replica 0 learns a new trip", func() bool { return stateOf(t, ps[0], "b").State == "open" })
}

func TestRetryExcludesKeyFailedOnOtherReplica(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, "redis: {read_timeout: 200ms}\n", map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	ps := replicas(t, srv, cfg, 2)
	rdb := srv.Client()
	for i := range 5 {
		req := PickRequest{RequestID: fmt.Sprint("req-", i), Attempt: 1}
		first := pick(t, ps[0], "b", req)
		first.Done(status(429)) // below the threshold: only this request avoids the key
		lag := waitFor(t, time.Second, "failed key recorded", func() bool {
			ok, _ := rdb.SIsMember(t.Context(), "sg:keypool:tried:"+req.RequestID, first.KeyID).Result()
			return ok
		})
		if i == 0 {
			t.Logf("failed key visible in Redis %s after the report", lag)
		}
		// Replica 1 has never seen this request. Fresh SWRR state on
		// both keys would pick "a" first; the retry must get the other.
		req.Attempt = 2
		second := pick(t, ps[1], "b", req)
		if second.KeyID == first.KeyID {
			t.Fatalf("retry on another replica reused %s", first.KeyID)
		}
		second.Done(status(200))
	}
	ttl, err := rdb.PTTL(t.Context(), "sg:keypool:tried:req-0").Result()
	if err != nil || ttl <= 0 || ttl > cfg.Request.Timeout.D() {
		t.Fatalf("tried set ttl %s %v", ttl, err)
	}
}

func TestFailClosedUnknownRemoteState(t *testing.T) {
	srv := redistest.Start(t)
	cfg := syncConfig(t, 50*time.Millisecond, "failure_modes: {breaker_sync: closed}\n")
	p := replicas(t, srv, cfg, 1)[0]
	srv.Stop()
	// Wait until the remote state counts as unknown.
	waitFor(t, 2*time.Second, "remote state unknown", func() bool {
		_, unknown := p.sync.unknownSince(time.Now())
		return unknown
	})
	// Each key lets one attempt through until it succeeds locally.
	var ls []Lease
	for range 3 {
		ls = append(ls, pick(t, p, "b", PickRequest{Attempt: 1}))
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("fourth pick with every key unconfirmed: %v", err)
	}
	ls[0].Done(status(200))
	for range 5 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID != ls[0].KeyID {
			t.Fatalf("picked unconfirmed key %s", l.KeyID)
		}
		l.Done(status(200))
	}
}

// TestNewestOnly: of a key's shared writes of one kind only the newest is
// sent, whichever comes first in the batch (kept writes after an outage
// are mostly older than the queued ones; a write the full queue dropped is
// newer); failed-key records and cancels all go.
func TestNewestOnly(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	state := func(key string, sec int) syncOp {
		return syncOp{backend: "b", key: key, state: &remoteState{Open: true, At: at.Add(time.Duration(sec) * time.Second)}}
	}
	ops := []syncOp{
		state("a", 2), // kept from a failed write, but newer than the queued one
		{backend: "b", key: "a", limits: "60 0", seq: 1},
		{key: "a", req: "r1"},
		state("a", 1),
		{backend: "b", key: "a", limits: "120 0", seq: 3},
		{backend: "b", key: "c", refused: "0.5000", seq: 2},
		{req: "r2", cancel: true},
		state("c", 1),
	}
	got := newestOnly(ops)
	var desc []string
	for _, op := range got {
		switch {
		case op.state != nil:
			desc = append(desc, fmt.Sprintf("state %s@%d", op.key, op.state.At.Sub(at)/time.Second))
		case op.limits != "":
			desc = append(desc, "limits "+op.key+" "+op.limits)
		case op.refused != "":
			desc = append(desc, "refused "+op.key)
		case op.cancel:
			desc = append(desc, "cancel "+op.req)
		default:
			desc = append(desc, "tried "+op.req)
		}
	}
	want := []string{"state a@2", "tried r1", "limits a 120 0", "refused c", "cancel r2", "state c@1"}
	if fmt.Sprint(desc) != fmt.Sprint(want) {
		t.Errorf("sent %v, want %v", desc, want)
	}
}

// TestRotatedSecretNotReadopted: a key's auth refusal is shared with a
// print of the refused secret (never the secret), so a replica that
// starts with the key's new secret does not adopt it, while one with the
// same secret still does; a record from an older release (no print) is
// adopted as before. The replica whose reload rotates the secret clears
// the shared record, so even those are not adopted afterwards.
func TestRotatedSecretNotReadopted(t *testing.T) {
	srv := redistest.Start(t)
	cfg := func(rotate bool) *config.Config {
		c := syncConfig(t, time.Hour, "") // polls only when the test says
		if rotate {
			c = rotated(t, c, "a")
		}
		return c
	}
	record := func() remoteState {
		t.Helper()
		v, err := srv.Client().HGet(t.Context(), "sg:keypool:breakers", "a").Result()
		if err != nil {
			return remoteState{}
		}
		_, _, _, rs, ok := decodeState(v)
		if !ok {
			t.Fatalf("undecodable record %q", v)
		}
		return rs
	}
	// adopted reports whether a replica starting now with cfg(rotate)
	// takes key a as open from Redis.
	adopted := func(rotate bool) bool {
		t.Helper()
		p := newPools(t, cfg(rotate), Options{Redis: redisClient(t, srv.Addr), ReplicaID: "late"})
		p.sync.poll(t.Context())
		return stateOf(t, p, "a").State == "open"
	}

	r0 := replicas(t, srv, cfg(false), 1)[0]
	_ = r0.Report(t.Context(), "b", "a", "", status(401))
	waitFor(t, 5*time.Second, "refusal shared", func() bool { return record().Open })
	if rs := record(); rs.Reason != ReasonAuth || rs.Secret == "" || strings.Contains(rs.Secret, "sk-") {
		t.Fatalf("shared refusal %+v: want reason auth with a print of the secret", rs)
	}
	for _, tc := range []struct {
		name   string
		rotate bool
		want   bool
	}{
		{"same secret adopts", false, true},
		{"new secret does not", true, false},
	} {
		if got := adopted(tc.rotate); got != tc.want {
			t.Errorf("%s: adopted %v, want %v", tc.name, got, tc.want)
		}
	}

	// An older release's record (nine fields, no print) is adopted.
	legacy := record()
	legacy.Secret, legacy.At = "", time.Now()
	if v := encodeState("old", "b", "a", legacy); strings.Count(v, "|") != 8 {
		t.Fatalf("record without a print %q: want nine fields", v)
	} else if err := srv.Client().HSet(t.Context(), "sg:keypool:breakers", "a", v).Err(); err != nil {
		t.Fatal(err)
	}
	if !adopted(true) {
		t.Error("record without a print not adopted")
	}

	// r0's reload rotates the secret: closed here, and the record with it.
	r0.SetConfig(cfg(true))
	if st := stateOf(t, r0, "a"); st.State != "closed" {
		t.Fatalf("after the rotation: %+v", st)
	}
	waitFor(t, 5*time.Second, "record cleared", func() bool { return !record().Open })
	if adopted(false) {
		t.Error("a replica with the old secret adopted the cleared refusal")
	}
}
