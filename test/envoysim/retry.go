package envoysim

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// retryDecision is RetryStateImpl's RetryDecision.
type retryDecision int

const (
	noRetry retryDecision = iota
	retryWithBackoff
)

// clusterResources is the part of a cluster's ResourceManager the retry
// budget reads (source/common/upstream/resource_manager_impl.h,
// RetryBudgetImpl, v1.38.0): requests in flight and retries in flight.
type clusterResources struct {
	active  atomic.Int64 // upstream_rq_active + upstream_rq_pending
	retries atomic.Int64 // retries scheduled or running
}

// canRetry is RetryBudgetImpl::canCreate: with a retry_budget, retries in
// flight must stay below max(budget_percent × active requests,
// min_retry_concurrency) (defaults 20 % and 3); without one, below
// max_retries (default 3).
func (c *Cluster) canRetry(r *clusterResources) bool {
	cur := r.retries.Load()
	if b := c.RetryBudget; b != nil {
		pct := b.BudgetPercent
		if pct == 0 {
			pct = 20
		}
		minc := int64(3)
		if b.MinRetryConcurrency != nil {
			minc = int64(*b.MinRetryConcurrency)
		}
		limit := max(int64(pct/100*float64(r.active.Load())), minc)
		return cur < limit
	}
	maxR := int64(3)
	if c.MaxRetries != nil {
		maxR = int64(*c.MaxRetries)
	}
	return cur < maxR
}

// retryState is one request's RetryStateImpl (source/common/router/retry_state_impl.cc, v1.38.0).
type retryState struct {
	s         *Sim
	rp        *RetryPolicy
	cl        *Cluster
	res       *clusterResources
	remaining int
	// nextInterval is JitteredExponentialBackOffStrategy's state
	// (source/common/common/backoff_strategy.cc, v1.38.0).
	nextInterval, base, maxB time.Duration
	// held: a retry resource is taken from scheduling a retry until the next
	// shouldRetry call or the end of the request (resetRetry).
	held bool
}

func newRetryState(s *Sim, rp *RetryPolicy, cl *Cluster, res *clusterResources) *retryState {
	base := rp.BackoffBase
	if base == 0 {
		base = 25 * time.Millisecond // runtime upstream.base_retry_backoff_ms default
	}
	maxB := rp.BackoffMax
	if maxB == 0 {
		maxB = 10 * base
	}
	return &retryState{s: s, rp: rp, cl: cl, res: res, remaining: rp.NumRetries, nextInterval: base, base: base, maxB: maxB}
}

func (r *retryState) enabled() bool { return r != nil && len(r.rp.RetryOn) > 0 }

func (r *retryState) on(policy string) bool { return slices.Contains(r.rp.RetryOn, policy) }

// release is resetRetry: the retry resource goes back.
func (r *retryState) release() {
	if r != nil && r.held {
		r.res.retries.Add(-1)
		r.held = false
	}
}

// fromHeaders is wouldRetryFromHeaders (retry_state_impl.cc, v1.38.0). It
// sees the response headers after the upstream filters ran (the router is
// handed the upstream filter chain's output).
func (r *retryState) fromHeaders(rh headers) retryDecision {
	if !r.enabled() {
		return noRetry
	}
	// x-envoy-ratelimited comes from an upstream Envoy: retried only with
	// envoy-ratelimited, whatever else retry_on says.
	if rh.has("x-envoy-ratelimited") {
		if r.on("envoy-ratelimited") {
			return retryWithBackoff
		}
		return noRetry
	}
	code, _ := strconv.Atoi(rh.get(":status"))
	switch {
	case r.on("5xx") && code >= 500 && code < 600,
		r.on("gateway-error") && (code == 502 || code == 503 || code == 504),
		r.on("retriable-4xx") && code == 409,
		r.on("retriable-status-codes") && slices.Contains(r.rp.RetriableStatusCodes, code) && code != 425:
		return retryWithBackoff
	}
	if r.on("retriable-headers") {
		for _, name := range r.rp.RetriableHeaders {
			if rh.has(name) {
				return retryWithBackoff
			}
		}
	}
	return noRetry
}

// fromReset is wouldRetryFromReset: connect-failure only for connection
// failures; reset, 5xx and gateway-error for every reset (a per-try timeout
// is a local reset, router.cc Filter::onPerTryTimeoutCommon).
func (r *retryState) fromReset(connect bool) retryDecision {
	if !r.enabled() {
		return noRetry
	}
	if connect && r.on("connect-failure") {
		return retryWithBackoff
	}
	if r.on("reset") || r.on("5xx") || r.on("gateway-error") {
		return retryWithBackoff
	}
	return noRetry
}

// retryStatus is RetryStatus.
type retryStatus int

const (
	retryNo retryStatus = iota
	retryYes
	retryLimitExceeded
	retryOverflow
)

// shouldRetry is RetryStateImpl::shouldRetry (+ shouldRetryHeaders for the
// rate-limited back-off): retries left, then the cluster's retry budget
// (upstream_rq_retry_overflow), then the wait: rate_limited_retry_back_off
// when a reset header parses to at most its max_interval (and more than
// 1 ms), jittered in [interval, 1.5×interval); otherwise the fully jittered
// exponential back-off, random in [0, next) with next doubling from
// base_interval up to max_interval.
func (r *retryState) shouldRetry(d retryDecision, rh headers) (retryStatus, time.Duration) {
	r.release()
	if d == noRetry {
		return retryNo, 0
	}
	if r.remaining == 0 {
		r.s.stats.retryLimitExceeded.Add(1)
		return retryLimitExceeded, 0
	}
	r.remaining--
	if !r.cl.canRetry(r.res) {
		r.s.stats.retryOverflow.Add(1)
		return retryOverflow, 0
	}
	r.res.retries.Add(1)
	r.held = true
	if iv, ok := r.resetInterval(rh); ok && iv > time.Millisecond {
		r.s.stats.retryRateLimited.Add(1)
		half := int64(iv / time.Millisecond >> 1)
		return retryYes, iv.Truncate(time.Millisecond) + time.Duration(r.s.randN(max(half, 1)))*time.Millisecond
	}
	cur := r.nextInterval
	if r.nextInterval < r.maxB/2 {
		r.nextInterval *= 2
	} else {
		r.nextInterval = r.maxB
	}
	ms := max(int64(cur/time.Millisecond), 1)
	return retryYes, time.Duration(r.s.randN(ms)) * time.Millisecond
}

// resetInterval is parseResetInterval: the first reset header whose value
// parses and is at most max_interval (default 300 s)
// (source/common/router/reset_header_parser.cc, v1.38.0).
func (r *retryState) resetInterval(rh headers) (time.Duration, bool) {
	if rh == nil {
		return 0, false
	}
	maxI := r.rp.RateLimitedMax
	if maxI == 0 {
		maxI = 300 * time.Second
	}
	for _, h := range r.rp.resetHeaders() {
		v := strings.TrimSpace(rh.get(h.Name))
		n, err := strconv.ParseUint(v, 10, 64)
		if v == "" || err != nil {
			continue
		}
		var iv time.Duration
		switch h.Format {
		case "UNIX_TIMESTAMP":
			now := uint64(time.Now().Unix())
			if n <= now {
				continue
			}
			iv = time.Duration(n-now) * time.Second
		default: // SECONDS
			iv = time.Duration(n) * time.Second
		}
		if iv <= maxI {
			return iv, true
		}
	}
	return 0, false
}

// resetHeaders: RetryAfterBackoff (the older field) means one
// "retry-after" header in SECONDS.
func (rp *RetryPolicy) resetHeaders() []ResetHeader {
	if len(rp.ResetHeaders) > 0 {
		return rp.ResetHeaders
	}
	if rp.RetryAfterBackoff {
		return []ResetHeader{{Name: "retry-after", Format: "SECONDS"}}
	}
	return nil
}

func (s *Sim) randN(n int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Int64N(n)
}
