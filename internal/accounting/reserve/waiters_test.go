package reserve

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

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
			first, err := r[0].Reserve(ctx, Request{RequestID: "a", Tenant: "tpmonly", PromptTokens: 800, MaxOutputTokens: 100})
			if err != nil {
				t.Fatal(err)
			}
			// Settled at 800: it counts one window from now.
			if err := r[0].Settle(ctx, first, pricing.Usage{PromptTokens: 700, CompletionTokens: 100}, 0); err != nil {
				t.Fatal(err)
			}
			_, err = r[0].Reserve(ctx, Request{RequestID: "b", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: tc.wait})
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
			// reserves before the grace ends; the newcomer follows it
			// through the queue.
			time.Sleep(le.RetryAfter + 20*time.Millisecond)
			if _, err := r[0].Reserve(ctx, Request{RequestID: "b", Tenant: "tpmonly", PromptTokens: 200, MaxOutputTokens: 100, Wait: tc.wait, Queued: true}); err != nil {
				t.Fatalf("waiter after the window freed: %v", err)
			}
			if _, err := r[1].Reserve(ctx, tc.newcomer); !errors.As(err, &le) || !le.Behind {
				t.Fatalf("newcomer within the grace: err = %v, want still behind", err)
			}
			queued := tc.newcomer
			queued.Queued = true
			if _, err := r[1].Reserve(ctx, queued); err != nil {
				t.Fatalf("newcomer through the queue: %v", err)
			}
			// After the grace the mark is gone.
			time.Sleep(waitGrace)
			if _, err := r[1].Reserve(ctx, Request{RequestID: "d", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1}); err != nil {
				t.Fatalf("after the grace: %v", err)
			}
		})
	}
}
