package reserve

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// fillWindow has tenant tpmonly's window (1000 tokens) hold 800 settled
// tokens for one window from now.
func fillWindow(t *testing.T, r *Reserver, id string) {
	t.Helper()
	first, err := r.Reserve(t.Context(), Request{RequestID: id, Tenant: "tpmonly", PromptTokens: 800, MaxOutputTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(t.Context(), first, pricing.Usage{PromptTokens: 700, CompletionTokens: 100}, 0); err != nil {
		t.Fatal(err)
	}
}

// TestWaitersComeFirst: a token refusal the request will wait out marks
// the scope, and until the window has freed for it (plus the grace) a
// request that did not wait its turn is refused even where it would fit,
// while one the queue admitted is not; a refusal nobody waits out leaves
// no mark.
func TestWaitersComeFirst(t *testing.T) {
	const window = 300 * time.Millisecond
	cases := []struct {
		name string
		// wait is how long the refused request waits (0: it does not).
		wait time.Duration
		// newcomer is the small request that arrives while it waits.
		newcomer   Request
		wantBehind bool
	}{
		{"waiter marks, newcomer held", time.Second, Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10, Wait: time.Second}, true},
		{"waiter marks, newcomer that will not wait held too", time.Second, Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10}, true},
		{"waiter marks, a queued request passes", time.Second, Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10, Queued: true}, false},
		{"no waiter, no mark", 0, Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10, Wait: time.Second}, false},
		{"a wait shorter than the window's, no mark", 100 * time.Millisecond, Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := testConfig(t, srv.Addr, "2s", "")
			r := replicas(t, srv, cfg, 2, window) // the newcomer on another replica
			ctx := t.Context()
			fillWindow(t, r[0], "a")
			_, err := r[0].Reserve(ctx, Request{RequestID: "b", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: tc.wait})
			var le *LimitError
			if !errors.As(err, &le) || le.Behind || le.RetryAfter <= 0 || le.RetryAfter > window {
				t.Fatalf("waiter: err = %v, want a window refusal", err)
			}
			_, err = r[1].Reserve(ctx, tc.newcomer)
			switch {
			case tc.wantBehind && (!errors.As(err, &le) || !le.Behind || le.Scope != ScopeTenant || le.RetryAfter <= 0 || le.RetryAfter > window):
				t.Fatalf("newcomer: err = %v, want a Behind refusal within the window", err)
			case !tc.wantBehind && err != nil:
				t.Fatalf("newcomer: err = %v, want it reserved (it fits)", err)
			}
			if !tc.wantBehind {
				return
			}
			// The waiter, admitted by the queue once the window frees,
			// is no longer waiting: another request that did not wait its
			// turn is held only while the newcomer itself waits (it was
			// refused with a Wait), and passes once nobody does.
			time.Sleep(le.RetryAfter + 20*time.Millisecond)
			if _, err := r[0].Reserve(ctx, Request{RequestID: "b", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: tc.wait, Queued: true}); err != nil {
				t.Fatalf("waiter after the window freed: %v", err)
			}
			other := Request{RequestID: "d", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1}
			_, err = r[1].Reserve(ctx, other)
			if newcomerWaits := tc.newcomer.Wait > 0; newcomerWaits != (errors.As(err, &le) && le.Behind) {
				t.Fatalf("another request once the waiter was admitted: err = %v, want behind %v", err, newcomerWaits)
			}
			queued := tc.newcomer
			queued.Queued = true
			if _, err := r[1].Reserve(ctx, queued); err != nil {
				t.Fatalf("newcomer through the queue: %v", err)
			}
			other.RequestID = "e"
			if _, err := r[1].Reserve(ctx, other); err != nil {
				t.Fatalf("nobody waits: %v", err)
			}
		})
	}
}

// TestWaiterLeaves: a waiter whose wait ends (or whose client leaves)
// without a reservation stops holding newcomers back at once, while
// another waiter on the scope still does; a waiter that never says so
// holds them until its window freed plus the grace.
func TestWaiterLeaves(t *testing.T) {
	const window = 2 * time.Second
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 2, window)
	ctx := t.Context()
	fillWindow(t, r[0], "a")
	var le *LimitError
	waiter := func(id string) Request {
		return Request{RequestID: id, Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: 3 * time.Second}
	}
	// The first waits for the window, the second (refused behind it) for
	// the first: both wait.
	for i, id := range []string{"b", "c"} {
		if _, err := r[0].Reserve(ctx, waiter(id)); !errors.As(err, &le) || le.Behind != (i == 1) {
			t.Fatalf("waiter %s: err = %v, want a refusal (behind: %v)", id, err, i == 1)
		}
	}
	newcomer := Request{RequestID: "n", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10}
	behind := func(step string) bool {
		t.Helper()
		res, err := r[1].Reserve(ctx, newcomer)
		if err != nil && !(errors.As(err, &le) && le.Behind) {
			t.Fatalf("%s: err = %v", step, err)
		}
		if err == nil {
			if err := r[1].Release(ctx, res); err != nil {
				t.Fatal(err)
			}
		}
		return err != nil
	}
	if !behind("two waiters") {
		t.Fatal("two waiters: the newcomer was reserved, want it behind them")
	}
	if err := r[0].Leave(ctx, waiter("b")); err != nil {
		t.Fatal(err)
	}
	if !behind("one waiter left") {
		t.Fatal("one of two waiters left: the newcomer was reserved, want it behind the other")
	}
	if err := r[1].Leave(ctx, waiter("c")); err != nil { // any replica may say so
		t.Fatal(err)
	}
	if behind("both left") {
		t.Fatal("both waiters left: the newcomer is still behind them")
	}
	// Leaving twice, or without having waited, changes nothing.
	if err := r[0].Leave(ctx, waiter("c")); err != nil {
		t.Fatal(err)
	}
	if err := r[0].Leave(ctx, Request{RequestID: "x", Tenant: "tpmonly"}); err != nil {
		t.Fatal(err)
	}
	newcomer.RequestID = "m"
	if behind("after repeated leaves") {
		t.Fatal("a repeated leave put a waiter back")
	}
}

// TestWaiterMarkEnds: a waiter that neither is admitted nor leaves (its
// replica stopped) holds newcomers back until the window freed for it plus
// the grace, no longer, and then no longer counts: a later waiter that
// leaves frees newcomers at once.
func TestWaiterMarkEnds(t *testing.T) {
	const window = 300 * time.Millisecond
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 2, window)
	ctx := t.Context()
	fillWindow(t, r[0], "a")
	var le *LimitError
	if _, err := r[0].Reserve(ctx, Request{RequestID: "b", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: time.Second}); !errors.As(err, &le) || le.Behind {
		t.Fatalf("waiter: err = %v, want a window refusal", err)
	}
	newcomer := Request{RequestID: "n", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1}
	if _, err := r[1].Reserve(ctx, newcomer); !errors.As(err, &le) || !le.Behind {
		t.Fatalf("newcomer: err = %v, want behind the waiter", err)
	}
	time.Sleep(le.RetryAfter + waitGrace + 50*time.Millisecond)
	if _, err := r[1].Reserve(ctx, newcomer); err != nil {
		t.Fatalf("after the waiter's window and grace: %v", err)
	}
	fillWindow(t, r[0], "a2")
	later := Request{RequestID: "c", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: time.Second}
	if _, err := r[0].Reserve(ctx, later); !errors.As(err, &le) || le.Behind {
		t.Fatalf("later waiter: err = %v, want a window refusal", err)
	}
	if err := r[0].Leave(ctx, later); err != nil {
		t.Fatal(err)
	}
	if _, err := r[1].Reserve(ctx, Request{RequestID: "m", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1}); err != nil {
		t.Fatalf("the later waiter left: %v (the expired one still counted?)", err)
	}
}
