package reserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// fakeKeys is a fixed key tree, as the sub-key store's cache would give it.
type fakeKeys map[string]KeyInfo

func (f fakeKeys) KeyInfo(id string) (KeyInfo, bool) { k, ok := f[id]; return k, ok }

func capped(amount float64, period string, alerts ...float64) KeyInfo {
	return KeyInfo{Tenant: "tree", Budget: KeyBudget{Amount: amount, Period: period, HardCap: true, Alerts: alerts}, HasBudget: true}
}

func child(parent string, info KeyInfo) KeyInfo { info.Parent = parent; return info }

// spent reads a key budget's spend counter for its current window.
func spent(t *testing.T, rdb *redis.Client, cfg *config.Config, keyID, period string) pricing.Money {
	t.Helper()
	_, _, k := keyScopeKeys(cfg.Redis.KeyPrefix, "tree", KeyHold{KeyID: keyID, Window: windowOf(period, time.Now())})
	v, err := rdb.Get(t.Context(), k).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return pricing.Money(v)
}

// alertHook collects webhook posts.
type alertHook struct {
	mu     sync.Mutex
	alerts []budget.Alert
}

func (h *alertHook) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a budget.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.mu.Lock()
		h.alerts = append(h.alerts, a)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (h *alertHook) fired() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, a := range h.alerts {
		out[fmt.Sprintf("%s/%s/%g", a.KeyID, a.Month, a.ThresholdPercent)]++
	}
	return out
}

// Three replicas (each its own Redis client, ledger and budgets) hammer
// the sub-keys of one minter and the tenant's own key at once. Every
// request's actual cost is at most its reserved estimate, so reserve-then-
// settle allows no overshoot at all: each child's, the minter's and the
// tenant's settled spend stay at or under their caps, and each cap binds
// (no room is left for one more request). Every key threshold fires once
// across the replicas.
func TestKeyBudgetsHoldAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	hook := &alertHook{}
	hs := hook.server(t)
	cfg := testConfig(t, srv.Addr, "2s", fmt.Sprintf("alerts: {webhook_url: %q, timeout: 2s}", hs.URL))
	keys := fakeKeys{
		"minter": capped(0.03, "month", 50),
		"c1":     child("minter", capped(0.012, "run", 50)),
		"c2":     child("minter", capped(0.012, "run", 50)),
		"c3":     child("minter", capped(0.012, "day", 50)),
		"c4":     {Tenant: "tree", Parent: "minter"}, // no budget of its own
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type replica struct {
		r *Reserver
		l *ledger.Ledger
		b *budget.Budgets
	}
	var reps []replica
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
		t.Cleanup(func() { _ = c.Close() })
		b := budget.New(c, cfg, budget.Options{Logger: quietLog()})
		go b.Run(ctx)
		lo := ledger.OptionsFrom(cfg)
		lo.Logger = quietLog()
		reps = append(reps, replica{
			r: New(c, cfg, Options{Logger: quietLog(), Keys: keys, ObserveKey: b.ObserveKey}),
			l: ledger.New(c, lo), b: b,
		})
	}
	est := pricing.RateOf(price).Estimate(1000, 1000)
	var mu sync.Mutex
	settled := map[string]pricing.Money{}
	refusedBy := map[string]int{}
	capReached := map[string]int{} // hard caps that refused on spend alone: their 100% alert fires
	var wg sync.WaitGroup
	var seq atomic.Int64
	who := []string{"c1", "c2", "c3", "c4", "v5"}
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := reps[w%3]
			for i := range 60 {
				key := who[(w+i)%len(who)]
				id := fmt.Sprint("req-", seq.Add(1))
				res, err := rep.r.Reserve(ctx, Request{RequestID: id, Tenant: "tree", Model: "big", KeyID: key,
					PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
				var ee *budget.ExceededError
				if errors.As(err, &ee) {
					mu.Lock()
					refusedBy[ee.KeyID]++
					if ee.Spent+ee.Requested > ee.Cap {
						capReached[fmt.Sprintf("%s/%s/100", ee.KeyID, ee.Month)] = 1
					}
					mu.Unlock()
					continue
				}
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				// The minter's keys spend their whole estimate; the
				// tenant's own key anything up to it.
				out := int64(1000)
				if key == "v5" {
					out = rand.Int64N(1001)
				}
				cost := pricing.RateOf(price).Estimate(1000, out)
				if err := rep.l.Record(ctx, ledger.Entry{RequestID: id, Tenant: "tree", Model: "big", KeyID: key, Cost: cost}); err != nil {
					t.Errorf("record: %v", err)
				}
				if err := rep.r.Settle(ctx, res, pricing.Usage{PromptTokens: 1000, CompletionTokens: out}, cost); err != nil {
					t.Errorf("settle: %v", err)
				}
				mu.Lock()
				settled[key] += cost
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	rdb := srv.Client()
	var tree pricing.Money
	for _, k := range who {
		tree += settled[k]
	}
	under := settled["c1"] + settled["c2"] + settled["c3"] + settled["c4"]
	for _, c := range []struct {
		key, period string
		want, cap   pricing.Money
	}{
		{"c1", "run", settled["c1"], pricing.FromFloat(0.012)},
		{"c2", "run", settled["c2"], pricing.FromFloat(0.012)},
		{"c3", "day", settled["c3"], pricing.FromFloat(0.012)},
		{"minter", "month", under, pricing.FromFloat(0.03)},
	} {
		got := spent(t, rdb, cfg, c.key, c.period)
		if got != c.want || got > c.cap {
			t.Errorf("%s spent %s (settled %s), cap %s", c.key, got, c.want, c.cap)
		}
	}
	if under+est <= pricing.FromFloat(0.03) {
		t.Errorf("the minter's cap never bound: %s spent under it", under)
	}
	month, err := rdb.HGet(ctx, ledger.MonthKey(cfg.Redis.KeyPrefix, "tree", ledger.MonthOf(time.Now())), ledger.TotalCostField).Int64()
	if err != nil || pricing.Money(month) != tree {
		t.Fatalf("tenant month %d (%v), settled %s", month, err, tree)
	}
	if tree > pricing.FromFloat(0.05) || tree+est <= pricing.FromFloat(0.05) {
		t.Errorf("tenant spent %s against its 0.05 cap (must stay under and bind)", tree)
	}
	if refusedBy["minter"] == 0 || refusedBy[""] == 0 {
		t.Errorf("refusals by budget: %v (want the minter's and the tenant's)", refusedBy)
	}
	// No hold is left behind: every admitted request settled.
	for _, k := range []string{"c1", "c2", "minter"} {
		p := keys[k].Budget.Period
		_, h, _ := keyScopeKeys(cfg.Redis.KeyPrefix, "tree", KeyHold{KeyID: k, Window: windowOf(p, time.Now())})
		if v, _ := rdb.HGet(ctx, h, "_sum").Int64(); v != 0 {
			t.Errorf("%s still holds %d", k, v)
		}
	}

	// Alerts: every threshold a key's final spend reached, and the 100% of
	// every cap that refused a request on spend alone, once.
	want := capReached
	for k, s := range map[string]pricing.Money{"c1": settled["c1"], "c2": settled["c2"], "c3": settled["c3"], "minter": under} {
		b := keys[k].Budget
		for _, pct := range []float64{50, 100} {
			if s >= pricing.FromFloat(b.Amount*pct/100) {
				want[fmt.Sprintf("%s/%s/%g", k, windowOf(b.Period, time.Now()), pct)] = 1
			}
		}
	}
	waitFor(t, "every expected alert delivered", func() bool { return len(hook.fired()) >= len(want) })
	for _, rep := range reps {
		waitFor(t, "alert queues drained", func() bool { return rep.b.Pending() == 0 })
	}
	got := hook.fired()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("alerts fired %v, want %v", got, want)
	}
	if want["minter/"+ledger.MonthOf(time.Now())+"/100"] != 1 {
		t.Fatalf("the minter's hard cap was not reached: %v", want)
	}
}

// A run budget stops its key at the cap for good: no Retry-After, since
// nothing resets it. A day budget's refusal waits for the next UTC day.
func TestKeyBudgetPeriods(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	keys := fakeKeys{"run": capped(0.006, "run"), "day": capped(0.006, "day")}
	now := time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC)
	r := New(srv.Client(), cfg, Options{Logger: quietLog(), Keys: keys, Now: func() time.Time { return now }})
	ctx := t.Context()
	for _, tc := range []struct {
		key   string
		retry time.Duration
	}{{"run", 0}, {"day", 6 * time.Hour}} {
		for i := range 3 {
			id := fmt.Sprint(tc.key, i)
			res, err := r.Reserve(ctx, Request{RequestID: id, Tenant: "tree", Model: "big", KeyID: tc.key,
				PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
			if i < 2 {
				if err != nil {
					t.Fatalf("%s request %d: %v", tc.key, i, err)
				}
				if err := r.Settle(ctx, res, pricing.Usage{PromptTokens: 1000, CompletionTokens: 1000}, pricing.FromFloat(0.003)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			var ee *budget.ExceededError
			if !errors.As(err, &ee) || ee.KeyID != tc.key || ee.Budget != tc.key || ee.RetryAfter != tc.retry ||
				ee.Spent != pricing.FromFloat(0.006) || ee.Cap != pricing.FromFloat(0.006) {
				t.Fatalf("%s request %d: %v (%+v), want the key's refusal with Retry-After %s", tc.key, i, err, ee, tc.retry)
			}
		}
	}
	// The tenant's own key is under none of them.
	if _, err := r.Reserve(ctx, Request{RequestID: "own", Tenant: "tree", Model: "big", KeyID: "v5",
		PromptTokens: 1000, MaxOutputTokens: 1000, Price: price}); err != nil {
		t.Fatal(err)
	}
}

// A key of another tenant ends the walk up the chain (its budget is never
// charged), and a soft budget holds nothing: it is counted at settle
// without a round trip at admission.
func TestKeyChainBoundaries(t *testing.T) {
	now := time.Now()
	keys := fakeKeys{
		"other": {Tenant: "acme", Budget: KeyBudget{Amount: 1, Period: "run", HardCap: true}, HasBudget: true},
		"stray": child("other", capped(0.5, "month")),
		"soft":  {Tenant: "tree", Budget: KeyBudget{Amount: 1, Period: "month", Alerts: []float64{90}}, HasBudget: true},
		"loop1": child("loop2", capped(1, "run")),
		"loop2": child("loop1", capped(2, "run")),
	}
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"stray", []string{"stray"}},
		{"soft", []string{"soft"}},
		{"loop1", []string{"loop1", "loop2", "loop1", "loop2", "loop1", "loop2", "loop1", "loop2"}},
		{"v5", nil},
	} {
		var got []string
		for _, h := range keyHolds(keys, "tree", tc.key, now) {
			got = append(got, h.KeyID)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: chain %v, want %v", tc.key, got, tc.want)
		}
	}
	// A soft budget alone: no round trip (this Redis does not exist).
	cfg := testConfig(t, "127.0.0.1:1", "2s", "")
	free := fakeKeys{"soft": {Tenant: "free", Budget: KeyBudget{Amount: 1, Period: "month", Alerts: []float64{90}}, HasBudget: true}}
	r := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), cfg, Options{Logger: quietLog(), Keys: free})
	res, err := r.Reserve(t.Context(), Request{RequestID: "x", Tenant: "free", Model: "big", KeyID: "soft", PromptTokens: 1, Price: price})
	if err != nil || res.Degraded || len(res.Keys) != 1 || len(res.Scopes) != 1 {
		t.Fatalf("soft budget: %+v %v", res, err)
	}
}

// Redis down with failure_modes.budget open: the request goes through
// unreserved, and its cost still reaches its keys' counters once Redis is
// back (the settle is buffered and replayed). Closed, it is refused.
func TestKeySpendCountedThroughAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "1m", "failure_modes: {budget: open}")
	keys := fakeKeys{"minter": capped(1, "month"), "c": child("minter", capped(0.5, "run"))}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	r := New(c, cfg, Options{Logger: quietLog(), Keys: keys, RetryInterval: 20 * time.Millisecond})
	ctx := t.Context()
	srv.Stop()
	res, err := r.Reserve(ctx, Request{RequestID: "out", Tenant: "tree", Model: "big", KeyID: "c", PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
	if err != nil || !res.Degraded || len(res.Keys) != 2 {
		t.Fatalf("fail open: %+v %v", res, err)
	}
	if err := r.Settle(ctx, res, pricing.Usage{PromptTokens: 1000, CompletionTokens: 10}, pricing.FromFloat(0.00102)); err != nil {
		t.Fatal(err)
	}
	if r.Pending() != 1 {
		t.Fatalf("%d settles buffered, want 1", r.Pending())
	}
	srv.Restart()
	go r.Run(ctx)
	waitFor(t, "the buffered settle replayed", func() bool { return r.Pending() == 0 })
	rdb := srv.Client()
	for _, k := range []struct{ id, period string }{{"c", "run"}, {"minter", "month"}} {
		if got := spent(t, rdb, cfg, k.id, k.period); got != pricing.FromFloat(0.00102) {
			t.Errorf("%s spent %s after the outage, want 0.00102", k.id, got)
		}
	}

	closed := testConfig(t, "127.0.0.1:1", "1m", "failure_modes: {budget: closed}")
	down := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), closed, Options{Logger: quietLog(), Keys: keys})
	if _, err := down.Reserve(ctx, Request{RequestID: "x", Tenant: "tree", Model: "big", KeyID: "c", PromptTokens: 1, Price: price}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fail closed: %v", err)
	}
}

// A hard cap's 100% alert fires once the cap refuses a request on spend
// alone: admission keeps spend + holds + worst case within the cap, so
// spend alone seldom reaches it (cap 0.01, requests of 0.003: spend stops
// at 0.009). A refusal only because of other requests' holds, or of a
// request larger than the whole cap, fires nothing; the alert fires once.
func TestHardCapAlertOnRefusal(t *testing.T) {
	srv := redistest.Start(t)
	hook := &alertHook{}
	hs := hook.server(t)
	cfg := testConfig(t, srv.Addr, "1m", fmt.Sprintf("alerts: {webhook_url: %q, timeout: 2s}", hs.URL))
	month := ledger.MonthOf(time.Now())
	tests := []struct {
		name, tenant, key string
		keys              fakeKeys
		budget, window    string // whose budget alerts ("": the tenant's), and its window
	}{
		{"tenant", "capped", "", nil, "", month},
		{"run key", "tree", "c", fakeKeys{"c": capped(0.01, "run", 50, 75, 90)}, "c", "run"},
		{"month key's minter", "tree", "c2", fakeKeys{"m2": capped(0.01, "month", 50, 75, 90), "c2": child("m2", KeyInfo{Tenant: "tree"})}, "m2", month},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			hook.mu.Lock()
			hook.alerts = nil
			hook.mu.Unlock()
			b := budget.New(srv.Client(), cfg, budget.Options{Logger: quietLog()})
			go b.Run(ctx)
			lo := ledger.OptionsFrom(cfg)
			lo.Logger, lo.AfterWrite = quietLog(), b.AfterWrite
			l := ledger.New(srv.Client(), lo)
			r := New(srv.Client(), cfg, Options{Logger: quietLog(), Keys: tc.keys, ObserveKey: b.ObserveKey})
			req := func(id string, prompt int) Request {
				return Request{RequestID: tc.name + id, Tenant: tc.tenant, Model: "big", KeyID: tc.key, PromptTokens: prompt, MaxOutputTokens: 1000, Price: price}
			}
			refused := func(id string, prompt int) {
				t.Helper()
				var be *budget.ExceededError
				if _, err := r.Reserve(ctx, req(id, prompt)); !errors.As(err, &be) {
					t.Fatalf("reserve %s: %v, want a budget refusal", id, err)
				}
			}
			// 0.003 each: three fit the 0.01 cap. The third is held while
			// the fourth asks: refused for the holds, no alert yet.
			var last Reservation
			for i := range 3 {
				if i == 2 {
					res, err := r.Reserve(ctx, req("2", 1000))
					if err != nil {
						t.Fatal(err)
					}
					last = res
					refused("held", 1000)
					refused("never", 1e7) // more than the whole cap
					break
				}
				res, err := r.Reserve(ctx, req(fmt.Sprint(i), 1000))
				if err != nil {
					t.Fatal(err)
				}
				settle(t, r, l, res, tc.name+fmt.Sprint(i))
			}
			settle(t, r, l, last, tc.name+"2")
			waitFor(t, "alerts delivered", func() bool { return b.Pending() == 0 })
			if got := hook.fired()[tc.budget+"/"+tc.window+"/100"]; got != 0 {
				t.Fatalf("100%% fired before a refusal on spend: %v", hook.fired())
			}
			// Spent 0.009: the fourth is refused on spend alone, twice.
			refused("3", 1000)
			refused("4", 1000)
			waitFor(t, "alerts delivered", func() bool { return b.Pending() == 0 && len(hook.fired()) == 4 })
			want := map[string]int{}
			for _, pct := range []string{"50", "75", "90", "100"} {
				want[tc.budget+"/"+tc.window+"/"+pct] = 1
			}
			if fmt.Sprint(hook.fired()) != fmt.Sprint(want) {
				t.Fatalf("alerts %v, want %v", hook.fired(), want)
			}
			hook.mu.Lock()
			defer hook.mu.Unlock()
			for _, a := range hook.alerts {
				full := a.ThresholdPercent == 100
				if a.HardCap != full || (a.Requested == pricing.FromFloat(0.003)) != full || (full && a.Spent != pricing.FromFloat(0.009)) {
					t.Errorf("alert %+v", a)
				}
			}
		})
	}
}

// settle records a request's cost (0.003) and settles it, as ext_proc does.
func settle(t *testing.T, r *Reserver, l *ledger.Ledger, res Reservation, id string) {
	t.Helper()
	cost := pricing.FromFloat(0.003)
	u := pricing.Usage{PromptTokens: 1000, CompletionTokens: 1000}
	if err := l.Record(t.Context(), ledger.Entry{RequestID: id, Tenant: res.Tenant, Model: "big", KeyID: res.KeyID, Usage: u, Cost: cost}); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(t.Context(), res, u, cost); err != nil {
		t.Fatal(err)
	}
}

// Left is what remains of the budgets above a new key: spend and holds in
// flight count as used, and the tightest budget on the chain wins.
func TestLeft(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "1m", "")
	keys := fakeKeys{"minter": capped(0.03, "month"), "c": child("minter", capped(0.01, "run"))}
	r := New(srv.Client(), cfg, Options{Logger: quietLog(), Keys: keys})
	ctx := t.Context()
	ask := func(id string) Reservation {
		res, err := r.Reserve(ctx, Request{RequestID: id, Tenant: "tree", Model: "big", KeyID: "c", PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if err := r.Settle(ctx, ask("a"), pricing.Usage{}, pricing.FromFloat(0.003)); err != nil {
		t.Fatal(err)
	}
	ask("b") // in flight: 0.003 held
	for _, tc := range []struct {
		tenant, key string
		want        float64
		ok          bool
	}{
		{"tree", "minter", 0.024, true}, // 0.03 - 0.003 spent - 0.003 held
		{"tree", "c", 0.004, true},      // the key's own run budget is tighter
		{"tree", "", 0.047, true},       // the tenant's: no ledger entry, 0.003 held
		{"free", "", 0, false},
	} {
		got, ok, err := r.Left(ctx, tc.tenant, tc.key)
		if err != nil || ok != tc.ok || got != pricing.FromFloat(tc.want) {
			t.Errorf("Left(%s, %q) = %s %v %v, want %v %v", tc.tenant, tc.key, got, ok, err, tc.want, tc.ok)
		}
	}
}

// When requests cost more than they reserved (a prompt under-estimated),
// a minter's budget is passed by at most what the requests in flight at the
// last admission cost beyond their holds: with 12 workers each one request
// at a time, at most 12 × the excess.
func TestKeyBudgetOvershootBound(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	keys := fakeKeys{"minter": capped(0.03, "month")}
	for _, c := range []string{"c1", "c2", "c3"} {
		keys[c] = KeyInfo{Tenant: "tree", Parent: "minter"}
	}
	reps := replicas(t, srv, cfg, 3, time.Minute)
	for i := range reps {
		reps[i].opts.Keys = keys
	}
	est := pricing.RateOf(price).Estimate(1000, 1000)
	excess := pricing.FromFloat(0.0005)
	var mu sync.Mutex
	var total pricing.Money
	var wg sync.WaitGroup
	var seq atomic.Int64
	const workers = 12
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				id := fmt.Sprint("o-", seq.Add(1))
				res, err := reps[w%3].Reserve(t.Context(), Request{RequestID: id, Tenant: "tree", Model: "big",
					KeyID: fmt.Sprint("c", 1+(w+i)%3), PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
				if err != nil {
					continue
				}
				if err := reps[w%3].Settle(t.Context(), res, pricing.Usage{}, est+excess); err != nil {
					t.Error(err)
				}
				mu.Lock()
				total += est + excess
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := spent(t, srv.Client(), cfg, "minter", "month")
	capAt := pricing.FromFloat(0.03)
	if got != total || got > capAt+workers*excess || got+est <= capAt {
		t.Fatalf("minter spent %s (settled %s): want within its cap 0.03 plus %d × %s, and the cap reached", got, total, workers, excess)
	}
	t.Logf("minter spent %s of 0.03 (bound %s)", got, capAt+workers*excess)
}
