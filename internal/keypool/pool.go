package keypool

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// keyState is one API key's live state. Every field is guarded by the
// owning KeyPool's mutex.
type keyState struct {
	cfg     config.APIKey
	backend string
	print   string // secretPrint of cfg.Secret
	hash    uint64 // of the key id, for rendezvous hashing
	current int    // smooth weighted round robin current weight
	ok      bool   // scratch: eligible in the pick being computed

	br           Breaker
	inFlight     int
	win          window
	limitedUntil time.Time // the shared KeyLimiter refused it until then
	// paceUntil is when the key's own pace (keypace.go) has its next slot,
	// as far as this replica knows: its last pick here plus the interval,
	// or what Redis said when it refused one.
	paceUntil time.Time
	// tokensLeft is the provider's last x-ratelimit-remaining-tokens minus
	// the estimates picked since, valid until tokensReset: a request
	// larger than what is left skips the key instead of earning a 429.
	tokensLeft  int
	tokensReset time.Time
	tokensSeq   uint32 // counts the provider's figures, so an undo adds back only to the one it took from
	// learnedRPM and learnedTPM are the limits the provider last stated
	// for the key (limits.go); 0: unknown. learnedRPM is per learnedWindow
	// when that is known (learnedwindow.go), else per minute.
	learnedRPM, learnedTPM int
	learnedWindow          time.Duration
	ownWindow              bool // the stated limit is the reset window's own, not a per-minute figure
	resetSeen              bool // a served answer stated when its request window resets
	// answered: the key has had an answer; reqLeft is its provider's last
	// x-ratelimit-remaining-requests (-1: not stated), valid until
	// reqLeftUntil (inflight.go).
	answered  bool
	firstSent time.Time // the key's first attempt (cold start, inflight.go)
	// firstBlind: the key's window was not known at that first attempt
	// (nor adopted from another replica), so its first window may have
	// filled in a burst (learnedwindow.go nextSlot).
	firstBlind   bool
	reqLeft      int
	reqLeftUntil time.Time
	// refused is the share of the key's answers that were the provider's
	// short refusals (refusal.go), a moving average; answeredAt is this
	// replica's last answer from the key (refusedshare.go).
	refused    float64
	answeredAt time.Time
	// signalledAttempts/Refused: the key's capacity when it last
	// signalled a change (capacity.go).
	signalledAttempts, signalledRefused float64
	lastStatus                          int
	picks                               uint64
	lastSuccess                         time.Time
	// syncProbe marks the one attempt allowed while the remote state is
	// unknown and failure_modes.breaker_sync is closed.
	syncProbe         bool
	syncProbeDeadline time.Time

	m keyMetrics
}

// limited reports whether the key has a local RPM or TPM to enforce.
func (k *keyState) limited() bool { return k.cfg.RPM > 0 || k.cfg.TPM > 0 }

// KeyPool is one backend's keys. Its mutex is held only for the in-memory
// selection step (a few hundred nanoseconds); no I/O happens under it.
type KeyPool struct {
	name  string
	owner *Pools

	mu      sync.Mutex
	keys    []*keyState
	byID    map[string]*keyState
	leases  leaseTable
	tried   triedTable
	rng     *rand.Rand
	healthy bool // as reported to the control plane (damped)
	damper  healthDamper
	mix     attemptMix // picks and retries, for the admission pace
}

func newKeyPool(owner *Pools, b *config.Backend) *KeyPool {
	kp := &KeyPool{
		name: b.Name, owner: owner, healthy: true,
		rng: rand.New(rand.NewPCG(fnv64(b.Name), uint64(time.Now().UnixNano()))),
	}
	kp.setKeys(b.Keys, time.Time{})
	return kp
}

// setKeys installs a new key list, keeping the state of ids that remain,
// except that a key whose secret changed loses an open state its provider
// refused the old secret with (401/403): that verdict was about the old
// secret, and kept it parked the new one for the auth cooldown. Those keys
// are returned in cleared, closed at now. Callers hold kp.mu (or own kp
// exclusively).
func (kp *KeyPool) setKeys(keys []config.APIKey, now time.Time) (removed, cleared []*keyState) {
	old := kp.byID
	kp.keys = make([]*keyState, 0, len(keys))
	kp.byID = make(map[string]*keyState, len(keys))
	for _, c := range keys {
		k, ok := old[c.ID]
		if !ok {
			k = &keyState{backend: kp.name, hash: mix64(fnv64(c.ID)), print: secretPrint(c.Secret)}
			k.m = kp.owner.metrics.forKey(kp.name, c.ID)
		}
		if ok && k.cfg.Weight != c.Weight {
			k.current = 0
		}
		if ok && k.cfg.Secret.Value() != c.Secret.Value() {
			k.print = secretPrint(c.Secret)
			if k.br.open && k.br.reason == ReasonAuth {
				k.br.close(now)
				cleared = append(cleared, k)
			}
		}
		k.cfg = c
		kp.keys = append(kp.keys, k)
		kp.byID[c.ID] = k
	}
	for id, k := range old {
		if _, ok := kp.byID[id]; !ok {
			removed = append(removed, k)
		}
	}
	return removed, cleared
}

// secretPrint names a secret in shared state without revealing it: 32
// bits of its SHA-256, enough to tell a rotated secret from the old one
// and too few to confirm a guess of it.
func secretPrint(s config.Secret) string {
	v := s.Value()
	if v == "" {
		return ""
	}
	h := sha256.Sum256([]byte("swarmgate keypool secret\x00" + v))
	return hex.EncodeToString(h[:4])
}

// exportLocked is k's breaker as shared with the other replicas: an auth
// opening names the secret it refused. Caller holds kp.mu.
func (k *keyState) exportLocked() remoteState {
	rs := k.br.export()
	if rs.Open && rs.Reason == ReasonAuth {
		rs.Secret = k.print
	}
	return rs
}

// pickInput is what one selection needs besides the request.
type pickInput struct {
	now           time.Time
	nowSec        int64 // now.Unix(), for the windows
	pol           *policy
	enforceWindow bool          // local RPM/TPM windows decide (no shared limiter, or it failed)
	pacing        bool          // each key's own pace decides too (keypace.go)
	paceBudget    time.Duration // how far ahead a pick may book a key's slot (budgetFor)
	paced         time.Duration // waited for keys' paces so far in this pick
	extended      bool          // the caller's timer was extended (PickRequest.Extend)
	syncUnknown   bool          // fail-closed and the remote state is unknown
	unknownSince  time.Time
	overflow      bool               // BestEffort second pass: any key not open
	soonest       *keyState          // past the pace bound: the key whose next slot is soonest
	slotAt        time.Time          // soonestPacedLocked: the slot a key is looked at for
	bypass        bool               // BestEffort: every key refused by the shared limiter; skip it
	remoteTried   []string           // key ids the request failed on, from Redis
	replicas      int                // replicas sharing what a key has left (inflight.go), ≥ 2
	skip          [maxSkip]*keyState // refused by the shared limiter in this call
	nskip         int
}

const maxSkip = 8

func (kp *KeyPool) excluded(in *pickInput, req *PickRequest, k *keyState) bool {
	for _, s := range in.skip[:in.nskip] {
		if s == k {
			return true
		}
	}
	if req.Attempt == 1 || req.RequestID == "" {
		return false
	}
	if kp.tried.contains(req.RequestID, k) || kp.leases.has(leaseKey{req.RequestID, k}) {
		return true
	}
	for _, id := range in.remoteTried {
		if id == k.cfg.ID {
			return true
		}
	}
	return false
}

func (kp *KeyPool) eligible(in *pickInput, req *PickRequest, k *keyState) bool {
	now := in.now
	if in.overflow {
		// Best effort, nothing strictly usable: any key that is not open
		// will do, over its caps, windows or exclusions. The provider's 429
		// on it is retried by Envoy and feeds the breaker; an attempt sent
		// without a credential gets a 401, which nobody retries. With the
		// pace on, not over what the provider says remains: that attempt
		// would only be refused.
		return (k.br.allow(now) || k.br.State(now) == HalfOpen) && !(in.pol.keyPace && k.overRemaining(now, in.replicas))
	}
	switch {
	case !k.br.allow(now) && !(in.overflow && k.br.State(now) == HalfOpen) && !(k.br.reason == ReasonQuota && k.drainedBy(in.slotAt)),
		k.cfg.MaxInFlight > 0 && k.inFlight >= k.cfg.MaxInFlight,
		now.Before(k.limitedUntil),
		in.pacing && now.Before(k.paceUntil),
		in.pol.keyPace && k.overRemaining(now, in.replicas) && !k.drainedBy(in.slotAt),
		in.enforceWindow && k.limited() && !k.win.allow(in.nowSec, k.cfg.RPM, k.cfg.TPM, req.EstTokens),
		in.syncUnknown && k.lastSuccess.Before(in.unknownSince) && k.syncProbe && now.Before(k.syncProbeDeadline),
		req.EstTokens > k.tokensLeft && now.Before(k.tokensReset):
		return false
	}
	return !kp.excluded(in, req, k)
}

// pick selects and reserves a key, or returns an *ExhaustedError (or a
// *pacedError when every usable key's next slot is beyond in.paceBudget).
// The selection and the reservation happen under one hold of kp.mu, so no
// other pick can take the slot in between; metrics wait until it is free.
func (kp *KeyPool) pick(in *pickInput, req *PickRequest) (Lease, error) {
	kp.mu.Lock()
	kp.housekeep(in.now, in.pol)
	k, booked, err := kp.selectLocked(in, req)
	if err != nil {
		kp.mu.Unlock()
		return Lease{}, err
	}
	if k == nil {
		ex := kp.exhaustedLocked(in, req)
		kp.mu.Unlock()
		kp.owner.metrics.pickFailures.WithLabelValues(kp.name).Inc()
		return Lease{}, ex
	}
	l := kp.reserveLocked(in, req, k, booked)
	kp.mu.Unlock()
	k.m.inFlight.Inc()
	return l, nil
}

// markEligibleLocked sets k.ok on every key that may take req under in
// (weighted, the requested key if one is named, eligible) and reports
// whether any may. Caller holds kp.mu.
func (kp *KeyPool) markEligibleLocked(in *pickInput, req *PickRequest) (some bool) {
	for _, k := range kp.keys {
		k.ok = k.cfg.Weight > 0 && (req.Key == "" || k.cfg.ID == req.Key) && kp.eligible(in, req, k)
		some = some || k.ok
	}
	return some
}

// selectLocked chooses the key for req: a strictly eligible one, else the
// soonest paced slot, else (best effort) any key that is not open, else
// (last resort) the open key that reopens soonest; nil when none will do.
// booked is how far ahead the slot taken on a paced key is. err is a
// *pacedError when the soonest slot is beyond in.paceBudget. It leaves
// in.overflow set when the key came from the best-effort or last-resort
// pass. Caller holds kp.mu.
func (kp *KeyPool) selectLocked(in *pickInput, req *PickRequest) (k *keyState, booked time.Duration, err error) {
	in.overflow = false
	some := kp.markEligibleLocked(in, req)
	if !some && in.pacing {
		// Keys whose only reason to wait is their pace: book the soonest
		// slot (the caller waits for it) rather than overflow onto a key
		// whose provider window may be full. Booking moves the key's next
		// slot on, so this replica's next waiter books the one after, or
		// another key's: no herd of waiters racing for one slot.
		if sk, wait, ok := kp.soonestPacedLocked(in, req); ok {
			if wait > in.budgetFor(sk.paceInterval()) {
				in.soonest = sk
				return nil, 0, &pacedError{wait: wait}
			}
			k, booked, some = sk, wait, true
		}
	}
	if !some && req.BestEffort {
		in.overflow = true
		some = kp.markEligibleLocked(in, req)
	}
	switch {
	case k != nil: // a paced key's slot, booked above
	case some && in.soonest != nil && in.soonest.ok && !in.overflow:
		// Every key is paced past the pick's bound and the pick goes on
		// without a slot: to the key whose window is nearest to room.
		k = in.soonest
	case some && req.Sticky != "":
		k = stickyPick(kp.keys, fnv64(req.Sticky))
	case some:
		k = swrr(kp.keys)
	case req.LastResort && req.Key == "":
		k = kp.lastResortLocked(in, req)
		in.overflow = k != nil
	}
	return k, booked, nil
}

// exhaustedLocked is the refusal when no key will do: when the client may
// come back, and whether the backend is failing rather than busy. Caller
// holds kp.mu.
func (kp *KeyPool) exhaustedLocked(in *pickInput, req *PickRequest) *ExhaustedError {
	now := in.now
	ra := kp.retryAfterLocked(in, req)
	if !kp.healthyLocked(now) {
		// Every key is open: the backend comes back through EDS.
		ra = max(ra, kp.backAtLocked(now).Sub(now))
	}
	return &ExhaustedError{Backend: kp.name, RetryAfter: ra, Failing: kp.failingLocked(now), held: kp.heldLocked(in),
		rest: kp.restLocked(in, req)}
}

// restLocked is how soon the first key that rests only until its
// provider's window resets (open for ReasonQuota) serves again, with the
// pace on (the request was admitted for these keys); 0 when none does.
// Keys this request may not use (tried, refused) are not waited for.
// Caller holds kp.mu.
func (kp *KeyPool) restLocked(in *pickInput, req *PickRequest) time.Duration {
	if !in.pol.keyPace {
		return 0
	}
	var soonest time.Duration
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 || (req.Key != "" && k.cfg.ID != req.Key) || k.br.State(in.now) != Open ||
			k.br.reason != ReasonQuota || kp.excluded(in, req, k) {
			continue
		}
		if d := k.br.until.Sub(in.now); d > 0 && (soonest == 0 || d < soonest) {
			soonest = d
		}
	}
	return soonest
}

// heldLocked reports whether some key would serve but for its cold start:
// the attempts it has in flight before its first answer. Caller holds
// kp.mu. (A key held to what its provider said remains is not waited
// for: measured in the storm of issue 27, waiting for those sent more
// attempts past their pace and drew the provider's 429s mid-run.)
func (kp *KeyPool) heldLocked(in *pickInput) bool {
	if !in.pol.keyPace {
		return false
	}
	for _, k := range kp.keys {
		if k.cfg.Weight > 0 && !k.answered && k.br.allow(in.now) && k.overRemaining(in.now, in.replicas) {
			return true
		}
	}
	return false
}

// reserveLocked charges the pick of k to its breaker (a half-open key's
// probe), in-flight count, token budget, window and pace, records the
// lease and returns it. Caller holds kp.mu.
func (kp *KeyPool) reserveLocked(in *pickInput, req *PickRequest, k *keyState, booked time.Duration) Lease {
	now := in.now
	in.overflow = in.overflow && !k.br.allow(now)
	probe := false
	if k.br.allow(now) {
		probe = k.br.acquire(now, &in.pol.br)
	}
	if in.syncUnknown && k.lastSuccess.Before(in.unknownSince) {
		k.syncProbe, k.syncProbeDeadline = true, now.Add(in.pol.br.probeTTL)
	}
	k.inFlight++
	if k.firstSent.IsZero() {
		k.firstSent, k.firstBlind = now, k.sharedWindow() <= 0
	}
	var tokens int
	if now.Before(k.tokensReset) {
		tokens = min(req.EstTokens, k.tokensLeft)
		k.tokensLeft -= tokens
	}
	if k.limited() {
		k.win.add(in.nowSec, 1, req.EstTokens)
	}
	var pace, drained time.Duration
	if booked > 0 && k.drainedBy(now.Add(booked)) {
		// Booked at the end of what its provider said was its last
		// request: no slot of its pace, wherever Redis puts it, is
		// earlier than that.
		drained = booked
	}
	if in.pacing && !in.overflow {
		if pace = k.paceInterval(); pace > 0 {
			// This replica's claim; Redis confirms it (Pools.Pick).
			k.paceUntil = now.Add(booked + pace)
		}
	}
	k.picks++
	kp.leases.add(leaseKey{req.RequestID, k}, probe)
	return Lease{Backend: kp.name, KeyID: k.cfg.ID, Secret: k.cfg.Secret, Probe: probe, Overflow: in.overflow,
		pool: kp, key: k, req: req.RequestID, pace: pace, booked: booked, drained: drained, tokens: tokens, tokensSeq: k.tokensSeq}
}

// undo takes back a pick the shared limiter or the key's pace refused, or
// whose caller left before it was handed out.
func (kp *KeyPool) undo(now time.Time, l Lease, est int, limitedUntil, paceUntil time.Time) {
	kp.mu.Lock()
	k := l.key
	found, _ := kp.leases.release(leaseKey{l.req, k})
	if found {
		k.inFlight--
	}
	if k.limited() {
		k.win.add(now.Unix(), -1, -est)
	}
	if l.tokens > 0 && l.tokensSeq == k.tokensSeq {
		// Nothing was sent: the estimate goes back to what the provider
		// said remains (unless it has said anew since, without it).
		k.tokensLeft += l.tokens
	}
	k.picks--
	if l.Probe {
		k.br.releaseProbe()
	}
	k.syncProbe = false
	if limitedUntil.After(k.limitedUntil) {
		k.limitedUntil = limitedUntil
	}
	if !paceUntil.IsZero() {
		k.paceUntil = paceUntil
	}
	kp.mu.Unlock()
	if found {
		k.m.inFlight.Dec()
	}
}

// housekeep expires leaked leases and old tried-sets. Caller holds kp.mu.
func (kp *KeyPool) housekeep(now time.Time, pol *policy) {
	kp.leases.rotate(now, pol.leaseTTL, func(lk leaseKey, v leaseVal) {
		lk.key.inFlight -= int(v.n)
		lk.key.m.inFlight.Sub(float64(v.n))
		kp.owner.metrics.leasesExpired.WithLabelValues(kp.name).Add(float64(v.n))
	})
	kp.tried.rotate(now, pol.triedTTL)
}

// retryAfterLocked is the soonest any key could serve the client's next
// request. Keys this request already tried count: the client's retry is a
// new request, which may use them again.
func (kp *KeyPool) retryAfterLocked(in *pickInput, req *PickRequest) time.Duration {
	const unknown = time.Second
	now := in.now
	best := time.Duration(-1)
	consider := func(d time.Duration) {
		if d > 0 && (best < 0 || d < best) {
			best = d
		}
	}
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 || (req.Key != "" && k.cfg.ID != req.Key) {
			continue
		}
		switch k.br.State(now) {
		case Open:
			consider(k.br.until.Sub(now))
			continue
		case HalfOpen:
			if !k.br.allow(now) {
				consider(min(k.br.probeDeadline.Sub(now), unknown))
				continue
			}
		}
		if now.Before(k.limitedUntil) {
			consider(k.limitedUntil.Sub(now))
		}
		if req.EstTokens > k.tokensLeft && now.Before(k.tokensReset) {
			consider(k.tokensReset.Sub(now))
		}
		if k.cfg.MaxInFlight > 0 && k.inFlight >= k.cfg.MaxInFlight || in.pol.keyPace && k.overRemaining(now, in.replicas) {
			consider(inFlightWait)
		}
		if in.enforceWindow && k.limited() {
			consider(k.win.wait(now, k.cfg.RPM, k.cfg.TPM, req.EstTokens))
		}
		if in.syncUnknown && k.syncProbe {
			consider(unknown)
		}
	}
	if best <= 0 {
		return unknown
	}
	return best
}

// healthyLocked: some key is not open (closed, or half-open so a probe can
// flow). A key resting until its quota window resets is capacity that
// comes back (the pace counts it), but not for EDS: while every key of a
// backend rests, Envoy should send the pool's traffic to the next relay
// rather than into attempts that only draw the provider's 429 (measured:
// ten times the upstream 429s in the swarm when resting keys kept their
// backend healthy). Caller holds kp.mu.
func (kp *KeyPool) healthyLocked(now time.Time) bool {
	for _, k := range kp.keys {
		if k.cfg.Weight > 0 && k.br.State(now) != Open {
			return true
		}
	}
	return false
}

// lastResortLocked is the open key that reopens soonest, skipping keys the
// provider refused and keys this request tried (see PickRequest.LastResort).
// Caller holds kp.mu.
func (kp *KeyPool) lastResortLocked(in *pickInput, req *PickRequest) *keyState {
	var best *keyState
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 || k.br.reason == ReasonAuth || kp.excluded(in, req, k) {
			continue
		}
		if best == nil || k.br.until.Before(best.br.until) {
			best = k
		}
	}
	return best
}

// failingLocked reports whether every key of the backend is open because
// it failed (5xx, resets, refused credentials) rather than because it is
// rate limited, out of quota or busy. Caller holds kp.mu.
func (kp *KeyPool) failingLocked(now time.Time) bool {
	n := 0
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 {
			continue
		}
		if k.br.State(now) != Open || (k.br.reason != ReasonFailures && k.br.reason != ReasonAuth) {
			return false
		}
		n++
	}
	return n > 0
}

// restingLocked reports whether every key of the backend is open because
// the provider limited it (quota, Retry-After, or 429s), none because it
// failed: the backend is out of capacity until the provider's reset, not
// broken. Caller holds kp.mu.
func (kp *KeyPool) restingLocked(now time.Time) bool {
	n := 0
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 {
			continue
		}
		if k.br.State(now) != Open || (k.br.reason != ReasonQuota && k.br.reason != ReasonRateLimited) {
			return false
		}
		n++
	}
	return n > 0
}

// soonestLocked is when the backend can be reported healthy again: the
// earliest end of an open key's period, but not before the damper's hold
// ends (zero when no key is open and nothing is held). A hold already over
// does not count: a backend that went down on the provider's rate limit
// is not held (healthDamper), so its release time is its down time, in
// the past, and starting from it made every wait negative (a Retry-After
// of 1 while the key stayed open for the provider's 10 s).
func (kp *KeyPool) soonestLocked(now time.Time) time.Time {
	var t time.Time
	for _, k := range kp.keys {
		if k.cfg.Weight > 0 && k.br.State(now) == Open && (t.IsZero() || k.br.until.Before(t)) {
			t = k.br.until
		}
	}
	if r := kp.damper.releaseAt(); r.After(now) && r.After(t) {
		t = r
	}
	return t
}

// backAtLocked is when a request for a backend that is (or is about to be
// reported) unhealthy can be admitted again: when soonestLocked reports it
// healthy plus the EDS push's settle time. Caller holds kp.mu.
func (kp *KeyPool) backAtLocked(now time.Time) time.Time {
	t := kp.soonestLocked(now)
	if t.Before(now) {
		t = now
	}
	return t.Add(edsSettle)
}

// refreshLocked updates the cached health and the state gauges after time
// passed; it reports whether health flipped.
func (kp *KeyPool) refreshLocked(now time.Time) bool {
	kp.housekeep(now, kp.owner.pol.Load())
	for _, k := range kp.keys {
		k.br.normalize(now)
		k.m.state.Set(float64(k.br.State(now)))
	}
	raw := kp.healthyLocked(now)
	h := kp.damper.report(now, raw, !raw && kp.restingLocked(now), &kp.owner.pol.Load().health)
	flipped := h != kp.healthy
	kp.healthy = h
	return flipped
}

// observe applies one outcome for key k of request req. The key's state
// changes under kp.mu; metrics, logs and Redis come after it is released
// (reportObserved), so no I/O happens under the lock.
func (kp *KeyPool) observe(k *keyState, req string, o Outcome, release, probe bool) {
	p := kp.owner
	now := p.clock.Now()
	pol := p.pol.Load()
	kp.mu.Lock()
	ob := observation{cls: o.class(), status: o.Status}
	ob.released, ob.probe = kp.releaseLeaseLocked(k, req, release, probe)
	if ob.cls == classNone {
		// No response seen: only the slot (and a probe) is given back.
		if ob.probe {
			k.br.releaseProbe()
		}
		k.syncProbe = false
		kp.mu.Unlock()
		if ob.released {
			k.m.inFlight.Dec()
		}
		return
	}
	kp.applyLocked(k, req, o, now, pol, &ob)
	kp.mu.Unlock()
	kp.reportObserved(k, req, now, &ob)
}

// observation is what observe changed on a key under kp.mu, carried out
// of the lock for reportObserved.
type observation struct {
	cls      outcomeClass
	status   int  // the upstream HTTP status
	failed   bool // Outcome.Failed: the request should not retry on the key
	released bool // the attempt's lease was found and freed
	probe    bool // the attempt was the key's half-open probe
	keyID    string

	learned                bool    // the provider stated new limits
	capacity               bool    // the key's capacity moved (capacity.go)
	refused                float64 // then its refused share, to be shared
	learnedRPM, learnedTPM int
	learnedWindow          time.Duration
	paced                  bool // a short refusal: the provider's pace, not a failure

	wasState State
	wasTrips int
	changed  bool // the breaker moved
	flipped  bool // so did the backend's health
	st       State
	rs       remoteState // the breaker after the outcome, as shared
}

// releaseLeaseLocked frees the attempt's lease when release is set and
// reports whether it was found and whether it (or the caller) was the
// key's probe. Caller holds kp.mu.
func (kp *KeyPool) releaseLeaseLocked(k *keyState, req string, release, probe bool) (released, wasProbe bool) {
	if release {
		released, wasProbe = kp.leases.release(leaseKey{req, k})
	}
	if released {
		k.inFlight--
	}
	return released, probe || wasProbe
}

// applyLocked feeds outcome o to k: the limits and token budget the
// provider stated, the refusal mix, the request's tried keys and the
// breaker; ob records what changed. o comes by value: the key's
// learners take copies of it, and copying from a pointer cost every
// report about 30 ns. Caller holds kp.mu.
func (kp *KeyPool) applyLocked(k *keyState, req string, o Outcome, now time.Time, pol *policy, ob *observation) {
	ob.keyID = k.cfg.ID // k.cfg may change under SetConfig once unlocked
	k.lastStatus = o.Status
	ob.learned = k.learn(o)
	if pol.keyPace {
		o.ResetRequests = k.nextSlot(o, now) // the key's pace spaces what follows
	}
	k.noteRemaining(o, now)
	ob.learnedRPM, ob.learnedTPM, ob.learnedWindow = k.learnedRPM, k.learnedTPM, k.sharedWindow()
	ob.paced = k.noteRefusal(o)
	if o.Status != 0 {
		k.answeredAt = now
	}
	if ob.capacity = pol.capacity && k.capacityMovedLocked(); ob.capacity {
		ob.refused = k.refused
	}
	if pol.br.honourRemaining && o.RemainingTokens >= 0 && o.ResetTokens > 0 {
		k.tokensLeft, k.tokensReset = o.RemainingTokens, now.Add(o.ResetTokens)
		k.tokensSeq++
	}
	k.syncProbe = false
	if ob.cls == classSuccess {
		k.lastSuccess = now
	}
	ob.failed = o.Failed()
	if ob.failed {
		kp.tried.add(req, k)
	}
	ob.wasState, ob.wasTrips = k.br.State(now), k.br.trips
	if !ob.paced {
		// A short refusal is the provider's pace, not a failure: the
		// request retries on another key (tried above) and the key keeps
		// serving its good share.
		ob.changed = k.br.observe(now, o, &pol.br, kp.rng.Float64())
	} else if ob.probe {
		// Nor is it the probe's verdict: the key neither proved it
		// recovered nor failed again (tripping it would double its open
		// period for the provider's pace). Free the slot so the next pick
		// probes; kept, it blocked the key for probeTTL.
		k.br.releaseProbe()
		ob.probe = false // neither ok nor fail in probes_total
	}
	ob.st = k.br.State(now)
	ob.rs = k.exportLocked()
	if ob.changed {
		ob.flipped = kp.refreshLocked(now)
	}
}

// reportObserved makes what applyLocked changed known: metrics and logs,
// the other replicas through Redis, and this replica's health watchers.
// Runs without kp.mu.
func (kp *KeyPool) reportObserved(k *keyState, req string, now time.Time, ob *observation) {
	p := kp.owner
	kp.countObserved(k, ob)
	if ob.changed {
		kp.announceTransition(k, now, ob)
	}
	if ob.paced {
		kp.mix.refused()
	}
	if ob.learned && p.sync != nil {
		p.sync.publishLimits(kp.name, ob.keyID, ob.learnedRPM, ob.learnedTPM, ob.learnedWindow)
	}
	if ob.capacity {
		p.signal() // BackendCapacity moved
		if p.sync != nil {
			p.sync.publishRefused(kp.name, ob.keyID, ob.refused)
		}
	}
	if ob.failed && req != "" && p.sync != nil {
		p.sync.addTried(req, ob.keyID)
	}
	if ob.flipped {
		p.signal()
	}
	if ob.changed && ob.st == Open {
		p.wake()
	}
}

// countObserved updates the key's in-flight, probe and auth-failure
// metrics for one outcome. Runs without kp.mu.
func (kp *KeyPool) countObserved(k *keyState, ob *observation) {
	if ob.released {
		k.m.inFlight.Dec()
	}
	if ob.probe {
		if ob.cls == classSuccess {
			k.m.probeOK.Inc()
		} else {
			k.m.probeFail.Inc()
		}
	}
	if ob.cls == classAuth {
		p := kp.owner
		p.metrics.authFailures.WithLabelValues(kp.name, ob.keyID, strconv.Itoa(ob.status)).Inc()
		p.log.Error("keypool: the provider refused a key; it is out of rotation until its auth cooldown ends", "backend", kp.name,
			"key", ob.keyID, "status", ob.status, "until", ob.rs.Until.Format(time.RFC3339))
	}
}

// announceTransition records a breaker move of k: its state gauge, a
// trip's count and log line (or the close's), and the new state for the
// other replicas. Runs without kp.mu.
func (kp *KeyPool) announceTransition(k *keyState, now time.Time, ob *observation) {
	p := kp.owner
	k.m.state.Set(float64(ob.st))
	if ob.rs.Trips > ob.wasTrips || ob.st == Open && ob.wasState != Open {
		p.metrics.trips.WithLabelValues(kp.name, ob.keyID, string(ob.rs.Reason)).Inc()
		p.log.Info("keypool: key opened", "backend", kp.name, "key", ob.keyID,
			"reason", string(ob.rs.Reason), "status", ob.status, "open_for", ob.rs.Until.Sub(now).Round(time.Millisecond))
	} else if ob.st == Closed && ob.wasState != Closed {
		p.log.Info("keypool: key closed", "backend", kp.name, "key", ob.keyID)
	}
	if p.sync != nil {
		p.sync.publish(kp.name, ob.keyID, ob.rs)
	}
}

// markTried keeps the request's next attempts off k (here and, through
// Redis, on other replicas) without counting anything against k.
func (kp *KeyPool) markTried(k *keyState, req string) {
	kp.mu.Lock()
	kp.tried.add(req, k)
	keyID := k.cfg.ID
	kp.mu.Unlock()
	if s := kp.owner.sync; s != nil {
		s.addTried(req, keyID)
	}
}

// adopt applies a transition learnt from another replica.
func (kp *KeyPool) adopt(keyID string, rs remoteState) (applied bool) {
	now := kp.owner.clock.Now()
	kp.mu.Lock()
	k, ok := kp.byID[keyID]
	if !ok || rs.Open && rs.Reason == ReasonAuth && rs.Secret != "" && rs.Secret != k.print {
		// Unknown key, or a refusal of a secret this replica no longer
		// uses (rotated under the same id); a record without a print
		// (older release) is adopted as before.
		kp.mu.Unlock()
		return false
	}
	applied = k.br.adopt(now, rs)
	flipped := false
	if applied {
		flipped = kp.refreshLocked(now)
	}
	kp.mu.Unlock()
	if flipped {
		kp.owner.signal()
	}
	if applied {
		kp.owner.wake()
	}
	return applied
}
