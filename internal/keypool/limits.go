package keypool

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Learned limits.
//
// Providers state each key's limits on every answer
// (x-ratelimit-limit-requests/-tokens; Anthropic's
// anthropic-ratelimit-{requests,tokens}-limit): per minute, unless the
// answers show the request limit is that of a shorter window (learnedwindow.go).
// The replica that sees an answer records them on the key and, when they
// change, writes them to the hash <prefix>keypool:limits (field
// backend|key, value "rpm tpm [window ms]"); every
// replica reads that hash on its breaker poll (breaker.sync_interval), so a
// router-level replica that never sees an upstream answer paces by them
// too. A limit changes rarely (a tier upgrade), so this is one write per
// key per change, not per request.

// limitsKey is the hash of learned limits under the Redis key prefix.
func limitsKey(prefix string) string { return prefix + "keypool:limits" }

// learn records the limits an answer stated. Caller holds kp.mu. It
// reports whether they changed (to be shared).
func (k *keyState) learn(o Outcome) bool {
	changed := false
	if o.LimitRequests > 0 && o.LimitRequests != k.learnedRPM {
		k.learnedRPM, changed = o.LimitRequests, true
	}
	if o.LimitTokens > 0 && o.LimitTokens != k.learnedTPM {
		k.learnedTPM, changed = o.LimitTokens, true
	}
	return k.learnWindow(o) || changed
}

// rpm and tpm are the per-minute limits the pace uses: the lower of the
// configured and the learned one where both are known (the operator may
// keep a key under the provider's limit, never above it); a learned
// request limit of a shorter window counts at its rate per minute.
// Caller holds kp.mu.
func (k *keyState) rpm() int { return lower(k.cfg.RPM, k.learnedPerMinute()) }
func (k *keyState) tpm() int { return lower(k.cfg.TPM, k.learnedTPM) }

func lower(configured, learned int) int {
	switch {
	case configured <= 0:
		return max(learned, 0)
	case learned <= 0:
		return configured
	}
	return min(configured, learned)
}

// encodeLimits writes "rpm tpm", plus the window in ms when the request
// limit is a shorter window's (replicas of older releases read the first
// two fields).
func encodeLimits(rpm, tpm int, window time.Duration) string {
	s := strconv.Itoa(rpm) + " " + strconv.Itoa(tpm)
	if window > 0 {
		s += " " + strconv.FormatInt(window.Milliseconds(), 10)
	}
	return s
}

func decodeLimits(field, v string) (backend, key string, rpm, tpm int, window time.Duration, ok bool) {
	backend, key, ok1 := strings.Cut(field, "|")
	f := strings.Fields(v)
	if !ok1 || len(f) < 2 || len(f) > 3 {
		return "", "", 0, 0, 0, false
	}
	rpm, err1 := strconv.Atoi(f[0])
	tpm, err2 := strconv.Atoi(f[1])
	if len(f) == 3 {
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ms < 0 {
			return "", "", 0, 0, 0, false
		}
		window = time.Duration(ms) * time.Millisecond
	}
	return backend, key, rpm, tpm, window, err1 == nil && err2 == nil
}

// adoptLimits applies limits another replica learned.
func (p *Pools) adoptLimits(all map[string]string) {
	changed := false
	defer func() {
		if changed {
			p.signal() // BackendCapacity may have changed
		}
	}()
	for field, v := range all {
		backend, key, rpm, tpm, window, ok := decodeLimits(field, v)
		if !ok {
			continue
		}
		changed = p.withKey(backend, key, func(k *keyState) bool {
			k.learnedRPM, k.learnedTPM = rpm, tpm
			k.adoptWindow(window)
			return k.capacityMovedLocked()
		}) || changed
	}
}

// withKey runs fn on backend's key under its pool's lock, if config has
// them; it reports what fn did (false when the key is unknown).
func (p *Pools) withKey(backend, key string, fn func(k *keyState) bool) bool {
	kp := p.pool(backend)
	if kp == nil {
		return false
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if k := kp.byID[key]; k != nil {
		return fn(k)
	}
	return false
}

// pollLimits reads the shared learned limits, and with capacity weights
// the shared refused shares (refusedshare.go), in one round trip (with the
// breaker poll).
func (s *syncer) pollLimits(ctx context.Context) {
	var limits, refused *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		limits = p.HGetAll(ctx, s.limitsKey)
		if s.p.pol.Load().capacity {
			refused = p.HGetAll(ctx, s.refusedKey)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.fail("poll_limits", err)
		}
		return
	}
	s.p.adoptLimits(limits.Val())
	if refused != nil {
		s.p.adoptRefused(refused.Val())
	}
}

// publishLimits queues the write of a key's learned limits.
func (s *syncer) publishLimits(backend, key string, rpm, tpm int, window time.Duration) {
	op := syncOp{backend: backend, key: key, limits: encodeLimits(rpm, tpm, window), seq: s.seq.Add(1)}
	select {
	case s.queue <- op:
	default:
		s.p.metrics.syncDropped.Inc()
		s.keepPending([]syncOp{op})
	}
}
