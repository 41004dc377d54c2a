package admit

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Reserve is the reservation step (accounting.token_limits: reserve): the
// prompt estimate and output reserve are held against the tenant's TPM
// limits and, at the dearest price of the backends that may serve it, its
// budget. A TPM refusal may wait in the queue for the window to free.
// On success f.Reservation is set and f.Reserved.
func (a *Admitter) Reserve(ctx context.Context, cfg *config.Config, f *Facts, t Timer) *Refusal {
	if !a.reserving(cfg, f) {
		return nil
	}
	tenant := f.Tenant()
	deadline, waits := a.tpmDeadline(cfg, f, t)
	// The reserver reads a missing output reserve as the default; the
	// dearest target must be chosen for the figures it holds.
	maxOut := f.MaxOut
	if maxOut <= 0 {
		maxOut = cfg.Request.DefaultMaxOutputTokens
	}
	req := ReserveRequest{RequestID: f.RequestID, Tenant: tenant, KeyID: f.KeyID(),
		Model: f.Alias, PromptTokens: f.EstTokens, MaxOutputTokens: f.MaxOut, Price: dearest(f.Model, f.Backends, f.EstTokens, maxOut)}
	if waits {
		req.Wait = time.Until(deadline)
	}
	res, err := a.Reserver.Reserve(ctx, req)
	if err == nil && !res.Granted && !res.Budget && !res.Never && waits {
		// A TPM window may free within the request's wait.
		res, err = a.reserveQueued(ctx, cfg, f, t, req, res, deadline)
	}
	switch {
	case err != nil:
		// The reserver applies failure_modes.reservation itself: an
		// error is a fail-closed refusal.
		a.failed("reserve")
		a.log().Warn("token reservation failed", "tenant", tenant, "err", err)
		return Unavailable("token reservation")
	case !res.Granted && res.BudgetKey != "":
		return KeyBudgetExceeded(f.KeyID(), res)
	case !res.Granted && res.Budget:
		return (&Refusal{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "budget_exceeded",
			Message: "Tenant `" + tenant + "` has used its monthly budget."}).withRetryAfter(res.RetryAfter)
	case !res.Granted && res.Never:
		return TooLargeForLimit(f, tenant, res)
	case !res.Granted:
		msg := "Rate limit reached for `" + f.Alias + "` (tokens per minute, " + res.Scope + " limit) on tenant `" + tenant +
			"`: limit " + strconv.FormatInt(res.Limit, 10)
		if res.Behind {
			msg += "; requests queued before this one are served first."
		} else {
			msg += ", remaining " + strconv.FormatInt(res.Remaining, 10) + ", requested " + strconv.Itoa(f.Need()) + "."
		}
		r := (&Refusal{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded",
			Message: msg}).withRetryAfter(res.RetryAfter)
		r.Headers = append(r.Headers, Header{"x-ratelimit-limit-tokens", strconv.FormatInt(res.Limit, 10)},
			Header{"x-ratelimit-remaining-tokens", strconv.FormatInt(res.Remaining, 10)},
			Header{"x-ratelimit-reset-tokens", res.Reset.Round(time.Millisecond).String()})
		return r
	}
	f.Reservation, f.Reserved = res, true
	return nil
}

// TooLargeForLimit: the request's prompt estimate and output reserve
// exceed a TPM limit's whole window, so it can never be served (OpenAI's
// "Request too large" answer). 429 as the provider answers it, without
// Retry-After and with x-should-retry: false, which the official SDKs
// obey instead of retrying with backoff.
func TooLargeForLimit(f *Facts, tenant string, res Reservation) *Refusal {
	limit := strconv.FormatInt(res.Limit, 10)
	return &Refusal{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded",
		Message: "Request too large for `" + f.Alias + "` (tokens per minute, " + res.Scope + " limit) on tenant `" + tenant +
			"`: limit " + limit + ", requested " + strconv.Itoa(f.Need()) + ". Reduce the input or max_tokens.",
		Headers: []Header{{"x-ratelimit-limit-tokens", limit}, {"x-should-retry", "false"}}}
}

// TooLargeForRateLimit is, with token_limits ratelimit, the refusal of a
// request whose prompt estimate (what Envoy charges at request time) is
// more than a TPM limit's whole window: the rate-limit filter would refuse
// it every minute, with a 429 the SDKs retry, and each refusal charged the
// window. Reserve mode finds it in the reservation (Never).
func TooLargeForRateLimit(cfg *config.Config, f *Facts) *Refusal {
	if cfg.Accounting.TokenLimits != "ratelimit" || !f.Spec.Billed || f.Owner.Tenant == nil {
		return nil
	}
	t := f.Owner.Tenant
	limits := [...]struct {
		scope string
		tpm   int
	}{
		{"tenant", t.Limits.TPM},
		{"model", t.ModelLimits[f.Alias].TPM},
		{"key", keyTPM(f.Owner.Key)},
		{"minting key", keyTPM(f.Owner.Parent)},
	}
	for _, l := range limits {
		if l.tpm > 0 && f.EstTokens > l.tpm {
			limit := strconv.Itoa(l.tpm)
			return &Refusal{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded",
				Message: "Request too large for `" + f.Alias + "` (tokens per minute, " + l.scope + " limit) on tenant `" + t.Name +
					"`: limit " + limit + ", requested " + strconv.Itoa(f.EstTokens) + ". Reduce the input.",
				Headers: []Header{{"x-ratelimit-limit-tokens", limit}, {"x-should-retry", "false"}}}
		}
	}
	return nil
}

func keyTPM(k *config.VirtualKey) int {
	if k == nil {
		return 0
	}
	return k.Limits.TPM
}

// KeyBudgetExceeded: a sub-key's budget (the caller's own, or that of the
// key that minted it) cannot hold the request: 429 as a tenant's spent
// budget answers, with the key's code. A run budget never frees room, so
// it carries no Retry-After.
func KeyBudgetExceeded(keyID string, res Reservation) *Refusal {
	period := map[string]string{"run": "lifetime", "day": "daily", "month": "monthly"}[res.BudgetPeriod]
	if period == "" {
		period = res.BudgetPeriod
	}
	msg := "This API key has used its " + period + " budget."
	if res.BudgetKey != keyID {
		msg = "This API key's parent key `" + res.BudgetKey + "` has used its " + period + " budget."
	}
	r := &Refusal{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "key_budget_exceeded", Message: msg}
	if res.RetryAfter > 0 {
		r.withRetryAfter(res.RetryAfter)
	}
	return r
}

// reserveQueued follows a tenant or tenant×model TPM refusal: with
// admission.max_wait > 0 and a Retry-After that fits the request's wait,
// the request waits in the admission queue until the window frees and the
// reservation is asked again. It returns the granted reservation, or the
// last refusal (its Retry-After counted from now) when the wait ends, the
// client leaves or the refusal cannot wait. A budget refusal never waits:
// a month does not free in seconds.
//
// The wait is ordered per reservation scope (the tenant, or tenant and
// model), not per backend set as the keys' wait: a tenant over its own
// TPM must not hold the tenants behind it on the same backends back.
// Within that scope the queue's class, weight and arrival rules hold.
//
// A request that stops waiting without a reservation tells the reserver,
// so the newcomers its refusal held behind it are not held any longer.
func (a *Admitter) reserveQueued(ctx context.Context, cfg *config.Config, f *Facts, t Timer, req ReserveRequest, res Reservation, deadline time.Time) (Reservation, error) {
	res, err := a.waitReserved(ctx, cfg, f, t, req, res, deadline)
	if err == nil && !res.Granted {
		// The client may have left: the reserver's own timeout bounds it.
		if err := a.Reserver.Leave(context.WithoutCancel(ctx), req); err != nil {
			a.log().Debug("token reservation: leaving the waiters failed", "tenant", req.Tenant, "err", err)
		}
	}
	return res, err
}

// waitReserved is reserveQueued's wait: the granted reservation or the
// last refusal.
func (a *Admitter) waitReserved(ctx context.Context, cfg *config.Config, f *Facts, t Timer, req ReserveRequest, res Reservation, deadline time.Time) (Reservation, error) {
	qr := queueRequest(cfg, f, t)
	qr.Scope = "tpm:" + res.Scope + ":" + req.Tenant
	if res.Scope == "model" {
		qr.Scope += ":" + req.Model
	}
	qr.Tokens = f.Need()
	if t != nil {
		answer := cfg.Request.MessageTimeout.Duration
		qr.OnWait = func() { t.Extend(time.Until(deadline) + answer) }
	}
	for {
		retryAt := time.Now().Add(res.RetryAfter)
		freed := a.freed.Load()
		qr.MaxWait = time.Until(deadline)
		if res.RetryAfter > qr.MaxWait {
			return res, nil
		}
		// Ready when the window frees, or earlier once a hold on this
		// replica settled or was released (most settle below their hold).
		// Not paced again: the keys' step already counted this request.
		q := a.Queue.Admit(ctx, qr, func() (bool, time.Duration, Rate) {
			wait := time.Until(retryAt)
			return wait <= 0 || a.freed.Load() != freed, max(wait, 0), Rate{}
		})
		if !q.Admitted {
			res.RetryAfter = max(time.Until(retryAt), q.RetryAfter)
			res.Reset = res.RetryAfter
			return res, nil
		}
		// Its turn: the mark earlier refusals left on the scope does not
		// hold it back.
		req.Queued, req.Wait = true, time.Until(deadline)
		next, err := a.Reserver.Reserve(ctx, req)
		if err != nil || next.Granted || next.Budget || next.Never {
			return next, err
		}
		// Someone took the window first (another replica, a request that
		// did not wait): wait again for the new Retry-After.
		res = next
	}
}

// tpmDeadline is when a request refused for a token limit stops waiting
// for the window, and whether it waits at all (a queue and
// admission.max_wait > 0). A keys' wait that already extended the message
// bounds it: Envoy honours only the first extension per message.
func (a *Admitter) tpmDeadline(cfg *config.Config, f *Facts, t Timer) (time.Time, bool) {
	if a.Queue == nil || cfg.Admission.MaxWait.Duration <= 0 {
		return time.Time{}, false
	}
	// The class's or tenant's own bound; not queueRequest, which also
	// names the session (an allocation per reserving request).
	d, _, _ := maxWait(cfg, f, t)
	if t != nil {
		if left, sent := t.Left(cfg.Request.MessageTimeout.Duration); sent {
			d = min(d, left)
		}
	}
	return time.Now().Add(d), true
}

// dearest is the price of the target on the backends whose worst case for
// this request (prompt and maxOut tokens, as the reserver prices the hold)
// is highest. Ranking by price per million alone could pick a target with
// dear output for a long prompt with a short answer, and hold less than
// the target that serves may cost.
func dearest(m *config.Model, backends []string, prompt, maxOut int) config.Price {
	var p config.Price
	var most pricing.Money
	for _, t := range m.Targets {
		if !slices.Contains(backends, t.Backend) {
			continue
		}
		if c := pricing.RateOf(t.Price).Estimate(int64(prompt), int64(maxOut)); c > most {
			p, most = t.Price, c
		}
	}
	return p
}
