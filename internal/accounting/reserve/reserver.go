package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Scope names (also the "scope" metric label).
const (
	ScopeTenant = "tenant" // tenant limits.tpm
	ScopeModel  = "model"  // tenant model_limits[model].tpm
	ScopeKey    = "key"    // Request.KeyTPM for the caller's virtual key
	ScopeBudget = "budget" // tenant budget with hard_cap
	// ScopeKeyBudget is a sub-key's budget, the request's own key's or a
	// key's above it (Reservation.Keys, in order).
	ScopeKeyBudget = "key_budget"
)

// Request is what admission knows about a request.
type Request struct {
	RequestID string // x-request-id: the reservation id
	Tenant    string
	Model     string // public model alias
	KeyID     string // caller's virtual key id
	// KeyTPM limits the virtual key, when the caller has a limit for it
	// (the configuration has none today); 0: no key scope.
	KeyTPM int
	// PromptTokens is the prompt estimate; MaxOutputTokens the request's
	// max_tokens (0: request.default_max_output_tokens).
	PromptTokens    int
	MaxOutputTokens int
	// Price is the chosen target's price, for the money budget.
	Price config.Price
	// Wait is how long the request will wait in the admission queue if a
	// token scope refuses it (0: it will not). A refusal it will wait out
	// marks the scope, and requests that did not wait their turn are
	// refused until the window has freed for it (LimitError.Behind), so a
	// newcomer cannot take the window the waiters wait for.
	Wait time.Duration
	// Queued: the request waited its turn in the queue; a scope's mark
	// does not hold it back.
	Queued bool
}

// waitGrace is how long after the window frees for a scope's waiters
// newcomers are still held behind them: a waiter reserves again once the
// queue's next step admits it (a poll, 20 ms by default, plus Redis).
const waitGrace = time.Second

// Reservation is an admitted request's hold. Keep it for Settle (the
// router-level ext_proc sees request and response on one stream).
type Reservation struct {
	RequestID string
	Tenant    string
	Model     string
	KeyID     string
	Month     string // month of the money hold
	// Scopes holds the scopes reserved in, in script order, and the key
	// budgets whose spend the settle counts (soft ones too: they hold
	// nothing but count for their alerts).
	Scopes []string
	// Keys are the key budgets on the request's chain, one per
	// ScopeKeyBudget in Scopes, the request's own key first.
	Keys []KeyHold
	// Prompt and MaxOutput are the reserved token parts, Tokens their sum,
	// Cost the reserved money (0 without a hard-capped budget).
	Prompt, MaxOutput, Tokens int64
	Cost                      pricing.Money
	// Degraded means Redis did not answer and the failure mode let the
	// request through unreserved; Settle then only counts the request's
	// cost toward its key budgets (buffered until Redis answers).
	Degraded bool
}

// Options configure a Reserver.
type Options struct {
	// Window is the token window (default one minute: TPM).
	Window time.Duration
	// PendingSettles bounds the settles and releases kept in memory while
	// Redis is unreachable (default 10000); beyond it the oldest is
	// dropped and its hold counts until the reservation TTL.
	PendingSettles int
	// RetryInterval is how often Run retries Redis while settles wait
	// (default 250ms); ReplayBatch how many one pass sends (default 64).
	RetryInterval time.Duration
	ReplayBatch   int
	// LedgerDrained, when set, holds replays back until it reports true:
	// the ledger must have replayed the entries carrying the real cost
	// before the money holds they replace go.
	LedgerDrained func() bool
	// Keys resolves sub-keys and their parents (nil: no key budgets).
	Keys Keys
	// ObserveKey, when set, sees a key budget's spend after every settle
	// that counted toward it, and every refusal by a hard cap (a key's or
	// the tenant's, KeySpend.Refused) on spend alone (budget alerts). It
	// must not block.
	ObserveKey func(ctx context.Context, s budget.KeySpend)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Reserver reserves and settles token and money holds in Redis.
type Reserver struct {
	rdb  redis.UniversalClient
	cfg  atomic.Pointer[config.Config]
	opts Options
	log  *slog.Logger
	m    *metrics

	// Settles Redis did not take wait here for Run.
	pending  pendingSettles
	healthy  atomic.Bool
	replayMu sync.Mutex
	lastDrop atomic.Int64 // unix nanos of the last drop log line
}

// New returns a Reserver for cfg.
func New(rdb redis.UniversalClient, cfg *config.Config, opts Options) *Reserver {
	if opts.Window <= 0 {
		opts.Window = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PendingSettles == 0 {
		opts.PendingSettles = 10000
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 250 * time.Millisecond
	}
	if opts.ReplayBatch <= 0 {
		opts.ReplayBatch = 64
	}
	r := &Reserver{rdb: rdb, opts: opts, log: opts.Logger.With("component", "reserve"), m: newMetrics(opts.Registerer)}
	r.pending.cap = opts.PendingSettles
	r.healthy.Store(true)
	r.cfg.Store(cfg)
	return r
}

// SetConfig swaps the configuration (hot reload). Settles of reservations
// made under the old one touch the scopes recorded in the Reservation.
func (r *Reserver) SetConfig(cfg *config.Config) { r.cfg.Store(cfg) }

type scope struct {
	name   string
	kind   string // "t" tokens, "m" tenant money, "k" key money
	limit  int64
	amount int64
	// z and h hold the reservations, base the spend they add to.
	z, h, base string
	// hold is the key budget of a "k" scope; reserved is false for a
	// budget without a hard cap (counted at settle, never held).
	hold     *KeyHold
	reserved bool
}

func (r *Reserver) scopeKeys(prefix, tenant, name, model, keyID, month string) (z, h string) {
	var s string
	switch name {
	case ScopeTenant:
		s = "rv:tpm:tenant"
	case ScopeModel:
		s = "rv:tpm:model:" + model
	case ScopeKey:
		s = "rv:tpm:key:" + keyID
	case ScopeBudget:
		s = "rv:money:" + month
	}
	return ledger.TenantKey(prefix, tenant, s+":z"), ledger.TenantKey(prefix, tenant, s+":h")
}

func settledKey(prefix, tenant, id string) string {
	return ledger.TenantKey(prefix, tenant, "rv:settled:"+id)
}

// Reserve admits the request into every applicable scope atomically, or
// refuses it with a *LimitError (TPM) or a *budget.ExceededError (money).
// A request with no applicable scope costs no Redis round trip. Reserving
// the same request id twice holds once.
func (r *Reserver) Reserve(ctx context.Context, req Request) (Reservation, error) {
	cfg := r.cfg.Load()
	t, ok := cfg.Tenant(req.Tenant)
	if !ok {
		return Reservation{}, fmt.Errorf("reserve: unknown tenant %q", req.Tenant)
	}
	if req.RequestID == "" {
		return Reservation{}, errors.New("reserve: request without id")
	}
	maxOut := int64(req.MaxOutputTokens)
	if maxOut <= 0 {
		maxOut = int64(cfg.Request.DefaultMaxOutputTokens)
	}
	prompt := max(int64(req.PromptTokens), 0)
	res := Reservation{
		RequestID: req.RequestID, Tenant: req.Tenant, Model: req.Model, KeyID: req.KeyID,
		Month: ledger.MonthOf(r.opts.Now()), Prompt: prompt, MaxOutput: maxOut, Tokens: prompt + maxOut,
	}
	all := r.scopesFor(cfg, t, req, &res)
	for _, s := range all {
		res.Scopes = append(res.Scopes, s.name)
	}
	scopes := make([]scope, 0, len(all))
	for _, s := range all {
		if s.reserved {
			scopes = append(scopes, s)
		}
	}
	if len(scopes) == 0 {
		// Nothing to hold (at most soft key budgets, counted at settle):
		// no round trip.
		return res, nil
	}
	prefix := cfg.Redis.KeyPrefix
	ttl := cfg.Accounting.ReservationTTL.D()
	keys := make([]string, 0, 1+3*len(scopes))
	keys = append(keys, settledKey(prefix, req.Tenant, req.RequestID))
	args := make([]any, 0, 8+3*len(scopes))
	args = append(args, member(req.RequestID), ttl.Milliseconds(), (ttl + r.opts.Window).Milliseconds(), len(scopes))
	for _, s := range scopes {
		keys = append(keys, s.z, s.h, s.base)
		args = append(args, s.kind, s.limit, s.amount)
	}
	queued := "0"
	if req.Queued {
		queued = "1"
	}
	args = append(args, max(req.Wait, 0).Milliseconds(), queued, r.opts.Window.Milliseconds(), waitGrace.Milliseconds())
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Redis.ReadTimeout.D())
	out, err := reserveScript.Run(ctx, r.rdb, keys, args...).Int64Slice()
	cancel()
	r.m.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		return r.unavailable(cfg, res, all, err)
	}
	if len(out) < 5 {
		return Reservation{}, fmt.Errorf("reserve: script returned %d values", len(out))
	}
	switch out[0] {
	case 1, 2:
		r.m.admitted.WithLabelValues(req.Tenant).Inc()
		return res, nil
	}
	s := scopes[out[1]-1]
	r.m.refused.WithLabelValues(req.Tenant, s.name).Inc()
	var held int64
	if len(out) > 5 {
		held = out[5]
	}
	err = r.refusal(req, res, s, out[2], out[3], held)
	if le, ok := err.(*LimitError); ok && len(out) > 6 && out[6] == 1 {
		le.Behind = true
	}
	if out[2] == -2 {
		r.capReached(ctx, req, res, s, out[3]-held)
	}
	return Reservation{}, err
}

// capReached tells budgets that a hard cap refused a request on spend
// alone (the script's -2: only the period's reset frees room): that fires
// the budget's 100% alert. Spend itself seldom reaches the cap, as every
// admission keeps spend + holds + worst case within it.
func (r *Reserver) capReached(ctx context.Context, req Request, res Reservation, s scope, spent int64) {
	if r.opts.ObserveKey == nil || (s.kind != "m" && s.kind != "k") {
		return
	}
	ks := budget.KeySpend{Tenant: req.Tenant, Window: res.Month, Spent: pricing.Money(spent), Budget: pricing.Money(s.limit),
		HardCap: true, Refused: true, Requested: pricing.Money(s.amount)}
	if h := s.hold; h != nil {
		ks.KeyID, ks.Period, ks.Window, ks.Alerts = h.KeyID, h.Period, h.Window, h.Alerts
	}
	r.opts.ObserveKey(ctx, ks)
}

func (r *Reserver) scopesFor(cfg *config.Config, t *config.Tenant, req Request, res *Reservation) []scope {
	prefix := cfg.Redis.KeyPrefix
	var scopes []scope
	add := func(name string, kind string, limit, amount int64) {
		z, h := r.scopeKeys(prefix, req.Tenant, name, req.Model, req.KeyID, res.Month)
		base := h
		if kind == "m" {
			base = ledger.MonthKey(prefix, req.Tenant, res.Month)
		}
		scopes = append(scopes, scope{name: name, kind: kind, limit: limit, amount: amount, z: z, h: h, base: base, reserved: true})
	}
	// With token_limits: ratelimit the Envoy rate-limit service enforces
	// TPM; only the money budget is reserved here.
	tokens := cfg.Accounting.TokenLimits != "ratelimit"
	if tokens && t.Limits.TPM > 0 {
		add(ScopeTenant, "t", int64(t.Limits.TPM), res.Tokens)
	}
	if ml, ok := t.ModelLimits[req.Model]; tokens && ok && ml.TPM > 0 && req.Model != "" {
		add(ScopeModel, "t", int64(ml.TPM), res.Tokens)
	}
	if tokens && req.KeyTPM > 0 && req.KeyID != "" {
		add(ScopeKey, "t", int64(req.KeyTPM), res.Tokens)
	}
	res.Keys = keyHolds(r.opts.Keys, req.Tenant, req.KeyID, r.opts.Now())
	capped := t.Budget != nil && t.Budget.HardCap
	for _, h := range res.Keys {
		capped = capped || h.HardCap
	}
	if capped {
		res.Cost = pricing.RateOf(req.Price).Estimate(res.Prompt, res.MaxOutput)
	}
	// Key budgets before the tenant's: a refusal names the closest budget
	// that cannot hold the request.
	for i := range res.Keys {
		h := &res.Keys[i]
		z, hh, spend := keyScopeKeys(prefix, req.Tenant, *h)
		scopes = append(scopes, scope{name: ScopeKeyBudget, kind: "k", limit: int64(h.Cap), amount: int64(res.Cost),
			z: z, h: hh, base: spend, hold: h, reserved: h.HardCap})
	}
	if b := t.Budget; b != nil && b.HardCap {
		add(ScopeBudget, "m", int64(pricing.FromFloat(b.Monthly)), int64(res.Cost))
	}
	return scopes
}

// unavailable applies the failure mode of each kind of limit involved: one
// closed kind refuses the request. Admitted unreserved, the request still
// counts toward its key budgets at settle (their counters are the
// gateway's own, the ledger does not keep them).
func (r *Reserver) unavailable(cfg *config.Config, res Reservation, scopes []scope, err error) (Reservation, error) {
	kinds := map[string]config.FailureMode{}
	for _, s := range scopes {
		switch {
		case !s.reserved:
		case s.kind == "t":
			kinds["reservation"] = cfg.FailureModes.Reservation
		default:
			kinds["budget"] = cfg.FailureModes.Budget
		}
	}
	for kind, mode := range kinds {
		r.m.storeFailures.WithLabelValues(kind, string(mode)).Inc()
		if mode == config.FailClosed {
			r.log.Warn("reserve: redis unavailable, refusing (fail closed)", "tenant", res.Tenant, "limit", kind, "err", err)
			return Reservation{}, fmt.Errorf("reserve: tenant %q %s limit: %w: %w", res.Tenant, kind, ErrUnavailable, err)
		}
	}
	r.log.Warn("reserve: redis unavailable, admitting unreserved (fail open)", "tenant", res.Tenant, "err", err)
	res.Degraded = true
	res.Scopes = nil
	for range res.Keys {
		res.Scopes = append(res.Scopes, ScopeKeyBudget)
	}
	return res, nil
}

func (r *Reserver) refusal(req Request, res Reservation, s scope, retryMs, used, held int64) error {
	now := r.opts.Now()
	if s.kind == "m" || s.kind == "k" {
		e := &budget.ExceededError{Tenant: req.Tenant, Budget: "monthly", Month: res.Month,
			Spent: pricing.Money(used - held), Held: pricing.Money(held),
			Requested: pricing.Money(s.amount), Cap: pricing.Money(s.limit)}
		reset := budget.UntilNextMonth(now)
		if s.hold != nil {
			e.KeyID, e.Budget, e.Month = s.hold.KeyID, s.hold.Period, s.hold.Window
			reset = untilReset(s.hold.Period, now)
		}
		if retryMs == -2 {
			e.RetryAfter = reset // 0 for a run budget: nothing frees it
		} else if retryMs > 0 {
			e.RetryAfter = min(time.Duration(retryMs)*time.Millisecond, r.opts.Window)
		}
		return e
	}
	e := &LimitError{Scope: s.name, Tenant: req.Tenant, Limit: s.limit, Used: used, Requested: s.amount, Window: r.opts.Window}
	switch s.name {
	case ScopeModel:
		e.Model = req.Model
	case ScopeKey:
		e.KeyID = req.KeyID
	}
	if retryMs > 0 {
		// Unsettled holds count until their TTL, but most settle within
		// seconds: do not tell a client to wait longer than one window.
		e.RetryAfter = min(time.Duration(retryMs)*time.Millisecond, r.opts.Window)
	} else if retryMs == 0 {
		e.RetryAfter = time.Millisecond
	}
	return e
}

// Leave tells the token scopes that req, refused earlier with a Wait, no
// longer waits (its wait ended, its client left): requests that did not
// wait their turn are no longer held behind it. A request the queue
// admitted into its reservation needs no Leave; a waiter that never
// leaves (its replica stopped) holds newcomers back at most until the
// window freed for it plus waitGrace.
func (r *Reserver) Leave(ctx context.Context, req Request) error {
	cfg := r.cfg.Load()
	t, ok := cfg.Tenant(req.Tenant)
	if !ok || req.RequestID == "" {
		return nil
	}
	res := Reservation{Month: ledger.MonthOf(r.opts.Now())}
	var keys []string
	for _, s := range r.scopesFor(cfg, t, req, &res) {
		if s.kind == "t" {
			keys = append(keys, s.z, s.h)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Redis.ReadTimeout.D())
	defer cancel()
	if err := leaveScript.Run(ctx, r.rdb, keys, member(req.RequestID)).Err(); err != nil {
		return fmt.Errorf("reserve: leave: %w", err)
	}
	return nil
}

// member is the scope member of a request (prefixed so no id collides with
// the "_sum" field).
func member(id string) string { return "r:" + id }

// Settle replaces the reservation by the real usage: the TPM scopes keep the
// actual tokens until one window after admission and refund the rest now;
// the money hold is removed (the ledger entry carries the real cost; record
// it before settling so spend is never under-counted). Settling twice, or
// after Release, does nothing. A settle Redis does not take (down, timing
// out) is buffered and replayed by Run once Redis answers again; it then
// returns nil. Only a settle Redis refuses returns an error.
func (r *Reserver) Settle(ctx context.Context, res Reservation, actual usage.Usage, cost pricing.Money) error {
	return r.settle(ctx, res, actual.Tokens(), cost)
}

// Release drops a reservation whose request never reached a provider
// (refused later, failed before upstream): everything is refunded.
func (r *Reserver) Release(ctx context.Context, res Reservation) error {
	return r.settle(ctx, res, 0, 0)
}

func (r *Reserver) settle(ctx context.Context, res Reservation, tokens int64, cost pricing.Money) error {
	if len(res.Scopes) == 0 {
		return nil
	}
	cfg := r.cfg.Load()
	prefix := cfg.Redis.KeyPrefix
	ttl := cfg.Accounting.ReservationTTL.D()
	keys := make([]string, 0, 1+3*len(res.Scopes))
	keys = append(keys, settledKey(prefix, res.Tenant, res.RequestID))
	args := make([]any, 0, 4+3*len(res.Scopes))
	args = append(args, member(res.RequestID), (ttl + r.opts.Window).Milliseconds(), r.opts.Window.Milliseconds(), len(res.Scopes))
	k := 0
	for _, name := range res.Scopes {
		switch name {
		case ScopeKeyBudget:
			h := res.Keys[k]
			k++
			z, hh, spend := keyScopeKeys(prefix, res.Tenant, h)
			keys = append(keys, z, hh, spend)
			args = append(args, "k", int64(cost), spendTTL(h.Period).Milliseconds())
		case ScopeBudget:
			z, h := r.scopeKeys(prefix, res.Tenant, name, res.Model, res.KeyID, res.Month)
			keys = append(keys, z, h, h)
			args = append(args, "m", int64(cost), 0)
		default:
			z, h := r.scopeKeys(prefix, res.Tenant, name, res.Model, res.KeyID, res.Month)
			keys = append(keys, z, h, h)
			args = append(args, "t", tokens, 0)
		}
	}
	p := pendingSettle{res: res, tokens: tokens, cost: cost, keys: keys, args: args, expires: r.opts.Now().Add(ttl), ttl: ttl}
	if !r.healthy.Load() {
		// Redis failed moments ago: queue behind the settles already
		// waiting instead of making this one wait for a timeout too.
		r.enqueue(p, errors.New("redis unavailable"))
		return nil
	}
	// Settle runs at stream end, possibly after the client went away: the
	// caller's cancellation must not skip it.
	start := r.opts.Now()
	err := r.runSettle(context.WithoutCancel(ctx), p)
	if err == nil {
		return nil
	}
	if retryable(err) {
		p.tried(start, err)
		r.enqueue(p, err)
		return nil
	}
	return fmt.Errorf("reserve: settle %s (the hold expires after %s): %w", res.RequestID, ttl, err)
}

// runSettle runs the settle script once and counts what it refunded.
func (r *Reserver) runSettle(ctx context.Context, p pendingSettle) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Load().Redis.ReadTimeout.D())
	defer cancel()
	out, err := settleScript.Run(ctx, r.rdb, p.keys, p.args...).Int64Slice()
	if err != nil {
		r.m.settleErrors.Inc()
		return err
	}
	if len(out) == 0 || out[0] == 0 {
		r.m.duplicateSettles.Inc()
		return nil
	}
	n := len(p.res.Scopes)
	tokenCounted := false
	k := 0
	for i, name := range p.res.Scopes {
		if i+1 >= len(out) {
			break
		}
		reserved := out[i+1]
		switch name {
		case ScopeKeyBudget:
			h := p.res.Keys[k]
			k++
			if r.opts.ObserveKey != nil && n+i+1 < len(out) {
				r.opts.ObserveKey(ctx, budget.KeySpend{Tenant: p.res.Tenant, KeyID: h.KeyID, Period: h.Period, Window: h.Window,
					Spent: pricing.Money(out[n+i+1]), Budget: h.Cap, HardCap: h.HardCap, Alerts: h.Alerts})
			}
		case ScopeBudget:
			if d := reserved - int64(p.cost); d > 0 {
				r.m.refundedMoney.Add(pricing.Money(d).Float())
			}
		default:
			if !tokenCounted {
				tokenCounted = true
				if d := reserved - p.tokens; d > 0 {
					r.m.refundedTokens.Add(float64(d))
				}
			}
		}
	}
	return nil
}
