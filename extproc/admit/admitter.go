package admit

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Admitter runs the steps that consult the gateway's collaborators. One
// serves every request of a server; it keeps no per-request state.
type Admitter struct {
	Keys Keys // required
	// Queue, when set, holds requests refused only for capacity that comes
	// back soon (admission.max_wait > 0); nil refuses at once.
	Queue Queue
	// Budgets, Reserver: nil skips the step.
	Budgets  Budgets
	Reserver Reserver
	// Owners, when set, routes a Responses request naming a
	// previous_response_id to the backend and key that created it; nil
	// refuses such requests.
	Owners Owners
	Log    *slog.Logger
	// Failed counts a failed accounting step ("budget", "reserve",
	// "affinity"); nil counts nothing.
	Failed func(step string)

	// freed counts settles and releases of reservations on this replica:
	// a request waiting for a TPM window asks again when it moves (a
	// settle usually frees part of its hold).
	freed atomic.Uint64
}

// Freed notes that a reservation was settled or released.
func (a *Admitter) Freed() { a.freed.Add(1) }

func (a *Admitter) failed(step string) {
	if a.Failed != nil {
		a.Failed(step)
	}
}

func (a *Admitter) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// Admit runs the steps after the route, in order: keys (waiting for them
// when the queue is on), budget, reservation. nil: f is admitted.
func (a *Admitter) Admit(ctx context.Context, cfg *config.Config, f *Facts, t Timer) *Refusal {
	if r := TooLargeForRateLimit(cfg, f); r != nil {
		return r
	}
	if r := a.Wait(ctx, cfg, f, t); r != nil {
		return r
	}
	if r := a.Budget(ctx, cfg, f); r != nil {
		return r
	}
	if r := a.Reserve(ctx, cfg, f, t); r != nil {
		return r
	}
	f.Admitted = true
	return nil
}

// reserving reports whether the request takes a reservation: the tokens
// of its TPM limits (token_limits: reserve) and the money its hard-capped
// budgets allow, the tenant's and its key's. With token_limits: ratelimit
// the rate-limit service enforces TPM, and with sub-keys on the
// reservation holds money only, so sub-key budgets hold, and are counted,
// in both modes (a request with no budget to hold costs no round trip);
// without sub-keys the Budget step checks the tenant's spend instead.
func (a *Admitter) reserving(cfg *config.Config, f *Facts) bool {
	return a.Reserver != nil && f.Spec.Billed && (cfg.Accounting.TokenLimits == "reserve" || cfg.Subkeys.Enabled)
}
