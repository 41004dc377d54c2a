package keypool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// KeyLimiter checks per-key RPM/TPM in the shared rate-limit service. It is
// defined here, where it is consumed; another package implements it.
type KeyLimiter interface {
	Allow(ctx context.Context, keyID string, tokens int) (ok bool, retryAfter time.Duration, err error)
}

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options are the dependencies of Pools.
type Options struct {
	// Redis shares breaker state and failed keys between replicas; nil
	// keeps everything local to this process.
	Redis      redis.UniversalClient
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics created but not registered
	Clock      Clock                 // nil: wall clock
	// Limiter is the shared per-key RPM/TPM check. When nil (or while it
	// returns errors) each replica enforces RPM/TPM alone with a sliding
	// window, so N replicas may together send up to N times the limit.
	Limiter KeyLimiter
	// LeaseTTL frees the in-flight slot of an attempt whose outcome never
	// comes; default request.long_timeout + request.message_timeout.
	LeaseTTL time.Duration
	// TriedTTL is how long the keys a request failed on are remembered
	// (locally and in Redis); default request.timeout.
	TriedTTL time.Duration
	// ReplicaID names this process in shared state; default random.
	ReplicaID string
}

// policy is everything derived from config that the hot path reads; it is
// swapped whole on SetConfig.
type policy struct {
	br           breakerPolicy
	failClosed   bool
	leaseTTL     time.Duration
	triedTTL     time.Duration
	syncInterval time.Duration
	readTimeout  time.Duration
	resetGrace   time.Duration
	health       healthPolicy
	// keyPace: each key's own pace applies to picks (admission.pace);
	// paceMaxWait bounds the waits for it in one pick (keypace.go),
	// paceLongWait those of a pick that can extend its caller's timer
	// (PickRequest.Extend), answerRoom is what the caller needs after.
	keyPace      bool
	paceMaxWait  time.Duration
	paceLongWait time.Duration
	answerRoom   time.Duration
	// capacity: BackendCapacity reports (admission.capacity_weights).
	capacity bool
}

// Pools holds one KeyPool per backend. All methods are safe for concurrent
// use. Call Run to share state through Redis and to get time-based health
// changes on Changes.
type Pools struct {
	opts    Options
	log     *slog.Logger
	clock   Clock
	metrics *metrics
	limiter KeyLimiter
	sync    *syncer // nil without Redis

	cfgMu sync.Mutex // serialises SetConfig
	pools atomic.Pointer[map[string]*KeyPool]
	pol   atomic.Pointer[policy]

	unanswered unanswered // attempts that ended without response headers

	changes     chan struct{}
	rearm       chan struct{} // a key opened: Run recomputes its timer
	limiterDown atomic.Int64  // unix nanos until which the local window decides
}

// PickRequest describes the attempt that needs a key.
type PickRequest struct {
	RequestID string // x-request-id, shared by all attempts of a request
	Attempt   int    // upstream.request_attempt_count: 1 first try; 0 unknown
	Sticky    string // session value; empty for no stickiness
	EstTokens int    // prompt + reserved output tokens, for TPM
	// BestEffort lets the attempt use any key that is not open (a
	// half-open key whose probe is out, a key over its caps, windows or
	// shared limit, a key this request already tried) when nothing else is
	// usable, instead of failing. Meant for the upstream filter: it cannot
	// answer locally, and an attempt without a credential draws a 401 that
	// Envoy does not retry, while the upstream's 429/5xx on such a key is
	// retried by Envoy on the next priority. Open keys still hold.
	BestEffort bool
	// LastResort, when even best effort finds no key, uses the open key of
	// the backend that reopens soonest (never one the provider refused with
	// 401/403, never one this request already tried). It is for an attempt
	// that Envoy should retry on another relay of the pool: a local reply
	// from the upstream filter is not retried, the provider's 429 or 5xx on
	// such a key is (and a dead relay's reset too), and the attempt still
	// leaves with a credential. The caller decides when that is worth one
	// more request on a cooling key.
	LastResort bool
	// Key, when set, is the only key the attempt may get (a Responses
	// request continuing a response this key created); no other key is
	// a substitute, whatever BestEffort and LastResort say.
	Key string
	// Extend, when set, lets the pick wait for a paced key's slot beyond
	// the caller's own timer (Envoy's message_timeout): before a wait
	// would pass the short bound, the pick calls it once with how long it
	// and the answer may still take. Without it, the short bound holds.
	Extend Extender
}

// Extender extends the caller's deadline for the pick's answer (the
// upstream filter's override_message_timeout).
type Extender interface {
	Extend(d time.Duration)
}

// New builds the pools for cfg.
func New(cfg *config.Config, opts Options) (*Pools, error) {
	if cfg == nil {
		return nil, errors.New("keypool: nil config")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.ReplicaID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.ReplicaID = hex.EncodeToString(b[:])
	}
	p := &Pools{
		opts: opts, log: opts.Logger, clock: opts.Clock, limiter: opts.Limiter,
		metrics: newMetrics(opts.Registerer),
		changes: make(chan struct{}, 1),
		rearm:   make(chan struct{}, 1),
	}
	p.pools.Store(&map[string]*KeyPool{})
	p.pol.Store(p.policyFor(cfg))
	if opts.Redis != nil {
		p.sync = newSyncer(p, opts.Redis, cfg.Redis.KeyPrefix, opts.ReplicaID)
	}
	p.SetConfig(cfg)
	return p, nil
}

func (p *Pools) policyFor(cfg *config.Config) *policy {
	lease := p.opts.LeaseTTL
	if lease <= 0 {
		lease = cfg.Request.LongTimeout.D() + cfg.Request.MessageTimeout.D()
	}
	tried := p.opts.TriedTTL
	if tried <= 0 {
		tried = cfg.Request.Timeout.D()
	}
	probe := cfg.Retry.PerTryTimeout.D()
	if probe <= 0 {
		probe = cfg.Request.Timeout.D()
	}
	pol := &policy{
		br:           newBreakerPolicy(cfg.Breaker, max(probe, time.Second)),
		failClosed:   cfg.FailureModes.BreakerSync == config.FailClosed,
		leaseTTL:     max(lease, time.Second),
		triedTTL:     max(tried, time.Second),
		syncInterval: cfg.Breaker.SyncInterval.D(),
		readTimeout:  cfg.Redis.ReadTimeout.D(),
		resetGrace:   cfg.Breaker.ResetGrace.D(),
		health: healthPolicy{hold: min(cfg.Breaker.HealthHold.D(), cfg.Breaker.MaxCooldown.D()),
			maxHold: cfg.Breaker.MaxCooldown.D(), window: cfg.Breaker.HealthFlapWindow.D()},
		keyPace:    cfg.Admission.Pace,
		capacity:   cfg.Admission.Pace && cfg.Admission.CapacityWeights,
		answerRoom: cfg.Request.MessageTimeout.D(),
	}
	pol.paceMaxWait, pol.paceLongWait = cfg.KeySlotWait()
	return pol
}

// SetConfig applies a reloaded config. Keys that keep their id keep their
// breaker state, in-flight count and windows; removed keys are forgotten.
func (p *Pools) SetConfig(cfg *config.Config) {
	p.cfgMu.Lock()
	defer p.cfgMu.Unlock()
	p.pol.Store(p.policyFor(cfg))
	old := *p.pools.Load()
	next := make(map[string]*KeyPool, len(cfg.Backends))
	now := p.clock.Now()
	for i := range cfg.Backends {
		b := &cfg.Backends[i]
		kp, ok := old[b.Name]
		if !ok {
			next[b.Name] = newKeyPool(p, b)
			continue
		}
		kp.mu.Lock()
		removed, cleared := kp.setKeys(b.Keys, now)
		states := make([]remoteState, len(cleared))
		for j, k := range cleared {
			states[j] = k.exportLocked()
		}
		kp.mu.Unlock()
		for _, k := range removed {
			p.metrics.forget(b.Name, k.cfg.ID)
		}
		for j, k := range cleared {
			p.log.Info("keypool: key's secret changed; its auth refusal is cleared", "backend", b.Name, "key", k.cfg.ID)
			if p.sync != nil {
				// Closed and newer: replaces the refusal in Redis, so a
				// replica that starts now does not adopt it.
				p.sync.publish(b.Name, k.cfg.ID, states[j])
			}
		}
		next[b.Name] = kp
	}
	for name, kp := range old {
		if _, ok := next[name]; !ok {
			for _, k := range kp.keys {
				p.metrics.forget(name, k.cfg.ID)
			}
			p.metrics.healthy.DeleteLabelValues(name)
		}
	}
	p.pools.Store(&next)
	p.refresh()
	if len(next) != len(old) {
		p.signal() // backends added or removed
	} else {
		for name := range next {
			if old[name] == nil {
				p.signal()
				break
			}
		}
	}
}

func (p *Pools) pool(backend string) *KeyPool { return (*p.pools.Load())[backend] }

// Pick chooses the key for one upstream attempt. It never blocks on Redis
// longer than redis.read_timeout, and only reads Redis for retries
// (Attempt > 1) to learn which keys the request already failed on; with
// Attempt 0 (unknown) only this replica's record is checked.
func (p *Pools) Pick(ctx context.Context, backend string, req PickRequest) (Lease, error) {
	kp := p.pool(backend)
	if kp == nil {
		return Lease{}, fmt.Errorf("%w: unknown backend %q", ErrNoKey, backend)
	}
	now := p.clock.Now()
	in := pickInput{now: now, nowSec: now.Unix(), pol: p.pol.Load(), replicas: p.replicas()}
	if p.sync != nil && !p.sync.picked.Load() {
		// Once: a store on every pick would bounce the flag's cache line
		// between the cores picking.
		p.sync.picked.Store(true)
	}
	p.readShared(ctx, &in, &req)
	var paced time.Duration // waited for keys' paces so far
	noPace := false         // waited the bound: pick as without the pace
	defer func() {
		if paced > 0 {
			p.metrics.paceWait.WithLabelValues(backend).Observe(paced.Seconds())
		}
	}()
	bound := in.pol.paceBound(&req)
	for {
		in.enforceWindow = p.limiter == nil || in.now.UnixNano() < p.limiterDown.Load()
		in.pacing = in.pol.keyPace && !noPace
		in.paceBudget = bound - paced
		in.paced = paced
		l, err := kp.pick(&in, &req)
		// kp.pick returns it unwrapped (errors.As would allocate per pick).
		if _, ok := err.(*pacedError); ok {
			// Every key's next slot is beyond what this pick may still
			// wait: pick as without the pace (see keypace.go).
			p.metrics.paceOverflow.WithLabelValues(backend).Inc()
			noPace = true
			continue
		}
		if ex, ok := err.(*ExhaustedError); ok {
			if d := ex.waitable(paced, in.pol.paceMaxWait); d > 0 {
				if err := p.waitPick(ctx, &in, &req, d); err != nil {
					return Lease{}, err
				}
				paced += d
				continue
			}
		}
		if err != nil {
			return Lease{}, err
		}
		if l.pace > 0 {
			waited, taken, err := p.awaitSlot(ctx, kp, backend, &in, &req, &l)
			if err != nil {
				return Lease{}, err
			}
			if !taken {
				continue
			}
			paced += waited
		}
		if in.enforceWindow || in.bypass {
			return p.hand(ctx, kp, &in, &req, &l)
		}
		ok, err := p.allowShared(ctx, kp, backend, &in, &req, &l)
		switch {
		case err != nil:
			return Lease{}, err
		case ok:
			return p.hand(ctx, kp, &in, &req, &l)
		case in.bypass:
			continue // every key is over its shared limit: send anyway (see BestEffort)
		}
		if err := ctx.Err(); err != nil {
			return Lease{}, fmt.Errorf("keypool: pick: %w", err)
		}
	}
}

// budgetFor is how far ahead this pick may book the slot of a key paced
// at interval (read under its pool's lock): within the short bound, or the
// long one (paceBudget) for a key paced slower than the short bound allows
// one slot of. Only those keys are waited for longer:
// a pick that waited seconds for a fast key's slot held a backlog of
// booked slots, which the storm's deadlines then cancelled unused (one
// run: completed 15.2 %, a worker key at 82 % of its window).
func (in *pickInput) budgetFor(interval time.Duration) time.Duration {
	if interval > in.pol.paceMaxWait {
		return in.paceBudget
	}
	return min(in.paceBudget, in.pol.paceMaxWait-in.paced)
}

// paceBound is how long one pick may wait for keys' paces in all: the
// long bound when the caller can extend its timer (PickRequest.Extend).
func (pol *policy) paceBound(req *PickRequest) time.Duration {
	if req.Extend != nil {
		return pol.paceLongWait
	}
	return pol.paceMaxWait
}

// waitPick waits d for a key that comes back within the pick's bound
// (ExhaustedError.waitable), extending the caller's timer first if the
// wait takes the pick past its short bound.
func (p *Pools) waitPick(ctx context.Context, in *pickInput, req *PickRequest, d time.Duration) error {
	p.extend(in, req, d)
	if err := sleepCtx(ctx, d); err != nil {
		return fmt.Errorf("keypool: pick: %w", err)
	}
	in.now = p.clock.Now()
	in.nowSec = in.now.Unix()
	return nil
}

// extend has the caller's timer extended, once, before a wait of d takes
// the pick past its short bound: to what is left of the long bound plus
// the room the answer needs.
func (p *Pools) extend(in *pickInput, req *PickRequest, d time.Duration) {
	if req.Extend == nil || in.extended || in.paced+d <= in.pol.paceMaxWait {
		return
	}
	in.extended = true
	req.Extend.Extend(in.pol.paceLongWait - in.paced + in.pol.answerRoom)
	p.metrics.paceExtended.Inc()
}

// hand gives l to the caller, unless the caller left during the pick:
// a Redis or limiter round trip cut short by ctx reads as "no answer" and
// the pick goes on, but nobody would send that attempt or free its slot,
// which stayed taken until the lease expired (a probe's until probeTTL).
func (p *Pools) hand(ctx context.Context, kp *KeyPool, in *pickInput, req *PickRequest, l *Lease) (Lease, error) {
	if err := ctx.Err(); err != nil {
		kp.undo(in.now, *l, req.EstTokens, time.Time{}, time.Time{})
		return Lease{}, fmt.Errorf("keypool: pick: %w", err)
	}
	p.granted(l, req.Attempt)
	return *l, nil
}

// granted counts a pick that stands, before its lease is handed out.
func (p *Pools) granted(l *Lease, attempt int) {
	l.key.m.picks.Inc()
	l.pool.mix.add(attempt)
}

// readShared adds to in what Redis knows of the request: the keys its
// earlier attempts failed on (only for a retry with a request id), and,
// under failure_modes.breaker_sync closed, since when the other replicas'
// breaker state is unknown.
func (p *Pools) readShared(ctx context.Context, in *pickInput, req *PickRequest) {
	if req.Attempt > 1 && req.RequestID != "" && p.sync != nil {
		in.remoteTried = p.sync.tried(ctx, req.RequestID)
	}
	if p.sync != nil && in.pol.failClosed {
		in.unknownSince, in.syncUnknown = p.sync.unknownSince(in.now)
	}
}

// awaitSlot has Redis confirm the pace slot kp.pick booked on l's key in
// this replica's view, then waits for it; waited is how long. taken is
// false when other replicas took the key's slots further ahead than the
// pick may wait: the pick is undone and the key skipped until its next
// slot. Without Redis, or when it does not answer, this replica's
// booking stands. err: ctx ended during the wait (the pick is undone).
func (p *Pools) awaitSlot(ctx context.Context, kp *KeyPool, backend string, in *pickInput, req *PickRequest, l *Lease) (waited time.Duration, taken bool, err error) {
	wait := l.booked
	if p.sync != nil {
		ok, w, perr := p.sync.takeSlot(ctx, backend, l.KeyID, l.pace, in.budgetFor(l.pace))
		if perr == nil && !ok {
			kp.undo(in.now, *l, req.EstTokens, time.Time{}, in.now.Add(w))
			return 0, false, nil
		}
		if perr == nil {
			wait = max(w, l.drained) // Redis's clock and every replica's bookings
		} // perr: Redis did not answer; this replica's booking stands.
	}
	if wait <= 0 {
		return 0, true, nil
	}
	p.extend(in, req, wait)
	if err := sleepCtx(ctx, wait); err != nil {
		kp.undo(in.now, *l, req.EstTokens, time.Time{}, time.Time{}) // the booked slot stays spent
		return 0, false, fmt.Errorf("keypool: pick: %w", err)
	}
	return wait, true, nil
}

// allowShared asks the shared limiter whether l's key may take the
// attempt. ok: the lease stands. Otherwise the pick is undone and the
// caller picks again: on the local windows for a second when the limiter
// is unreachable; past every refused key in in.skip, or with in.bypass
// set when a best-effort pick already overflowed (every key is over its
// shared limit). err is an *ExhaustedError once in.skip is full, or ctx's
// error when the caller left.
func (p *Pools) allowShared(ctx context.Context, kp *KeyPool, backend string, in *pickInput, req *PickRequest, l *Lease) (bool, error) {
	ok, retryAfter, err := p.limiter.Allow(ctx, l.KeyID, req.EstTokens)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: that says nothing about the limiter, whose
		// being off lets N replicas send N times a key's limit.
		kp.undo(in.now, *l, req.EstTokens, time.Time{}, time.Time{})
		return false, fmt.Errorf("keypool: pick: %w", ctx.Err())
	case err != nil:
		// The shared limiter is unreachable: let the local windows
		// decide for a second, then ask it again.
		if prev := p.limiterDown.Swap(in.now.Add(time.Second).UnixNano()); prev < in.now.UnixNano() {
			p.log.Warn("keypool: key limiter failed; using local windows", "backend", backend, "key", l.KeyID, "err", err)
		}
		kp.undo(in.now, *l, req.EstTokens, time.Time{}, time.Time{})
		return false, nil
	case ok:
		return true, nil
	}
	kp.undo(in.now, *l, req.EstTokens, in.now.Add(max(retryAfter, 100*time.Millisecond)), time.Time{})
	if req.BestEffort && in.overflow {
		in.bypass = true
		return false, nil
	}
	if in.nskip == maxSkip {
		return false, &ExhaustedError{Backend: backend, RetryAfter: max(retryAfter, time.Second)}
	}
	in.skip[in.nskip] = l.key
	in.nskip++
	return false, nil
}

// Report feeds the outcome of an attempt seen without its Lease (on any
// replica). It frees the attempt's in-flight slot when this replica holds
// it; elsewhere the slot expires with the lease TTL. Do not also call
// Lease.Done for the same attempt.
func (p *Pools) Report(ctx context.Context, backend, keyID, requestID string, o Outcome) error {
	kp, k, err := p.key(backend, keyID)
	if err != nil {
		return err
	}
	kp.observe(k, requestID, o, true, false)
	return nil
}

// key finds a key by backend and id, as config now has them (a reload may
// have removed either since the attempt began).
func (p *Pools) key(backend, keyID string) (*KeyPool, *keyState, error) {
	kp := p.pool(backend)
	if kp == nil {
		return nil, nil, fmt.Errorf("%w: unknown backend %q", ErrNoKey, backend)
	}
	kp.mu.Lock()
	k := kp.byID[keyID]
	kp.mu.Unlock()
	if k == nil {
		return nil, nil, fmt.Errorf("%w: backend %q has no key %q", ErrNoKey, backend, keyID)
	}
	return kp, k, nil
}

// signal wakes the Changes consumer without blocking; signals coalesce.
