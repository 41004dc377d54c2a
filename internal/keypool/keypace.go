package keypool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Per-key pace.
//
// The admission queue paces a backend set at the sum of its keys' rates
// (pace.go), but providers enforce each key's limit alone, in short
// quantized windows (OpenAI: "60,000 requests/minute may be enforced as
// 1,000 requests/second"). Each replica's rotation spreads admitted
// requests over the keys only on average, so a key whose window has one
// slot left could be picked by two replicas at once: 2.7 % of upstream
// requests were the provider's 429s in the 500-agent TestSwarmOverCapacity
// run with the set's pace alone.
//
// With admission.pace on, every pick of a key with a known request limit
// (the lower of its configured rpm and the one its provider states) takes
// a slot of that key's own pace: a GCRA without burst at keyPaceShare of
// the limit, one field per key in the hash <prefix>keypool:pace:{backend},
// decided in one EVALSHA on Redis's clock, so every replica's picks of
// the key are spaced by at least 60 s / (share·rpm) and no quantized
// window of the provider's can receive more than its share. A key whose
// slot is taken is skipped until the time Redis names (kept on the key,
// so this replica's next picks skip it without asking); when every usable
// key is paced, the pick waits for the soonest slot, at most
// min(request.message_timeout/2, 1 s) in all, and then goes on without a
// slot, to the key whose next slot is soonest (the attempt leaves with a
// credential rather than not at all; the provider's 429 on it is retried;
// in the storm of issue 27, sending these to the soonest key instead of
// the next in rotation took the upstream 429s from 1.5-1.9 % to 0.8-1.5 %). Redis unreachable: the
// same pace per replica, in memory, as the breaker sync falls back.

// keyPaceShare is the part of a key's stated request limit its own pace
// uses. Below 1 for the same reason as paceShare: an attempt reaches the
// provider a few milliseconds after its pick, differently each time, and
// a window that receives two attempts' worth of that jitter in its favour
// holds one request more than the spacing allows.
const keyPaceShare = paceShare

// paceHashKey is the hash of a backend's per-key arrival times. The
// backend name is the hash tag: one slot per backend in Redis Cluster.
func paceHashKey(prefix, backend string) string { return prefix + "keypool:pace:{" + backend + "}" }

// paceInterval is the spacing between two picks of k (0: the key has no
// known request limit and is not paced). Caller holds kp.mu.
func (k *keyState) paceInterval() time.Duration {
	rpm := k.rpm()
	if rpm <= 0 {
		return 0
	}
	return time.Duration(k.attemptFactor() * float64(time.Minute) / (keyPaceShare * float64(rpm)))
}

// pacedError: every key that could take the attempt has its next slot
// later; the soonest is wait from now.
type pacedError struct{ wait time.Duration }

func (e *pacedError) Error() string {
	return fmt.Sprintf("keypool: every usable key is paced for %s", e.wait)
}

// keyPaceScript: KEYS[1] the backend's pace hash; ARGV key id, interval
// (µs), ttl (ms), how far ahead a slot may be booked (µs). Returns 0 when
// the key's slot was taken now, a positive wait (µs) when the slot that
// far ahead was booked, and minus the wait when the next slot is further
// than that (nothing booked).
var keyPaceScript = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0'), now)
local wait = tat - now
if wait > tonumber(ARGV[4]) then return -math.ceil(wait) end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', tat + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return math.ceil(wait)
`)

// paceTTL bounds how long an idle backend's pace hash is kept.
const paceTTL = 10 * time.Minute

// takeSlot books k's next slot in Redis if it is at most ahead away. ok:
// booked, wait from now; otherwise wait is how far the next slot is. err:
// Redis did not answer (the local pace decides).
func (s *syncer) takeSlot(ctx context.Context, backend, keyID string, interval, ahead time.Duration) (ok bool, wait time.Duration, err error) {
	if s.down.Load() {
		return false, 0, errors.New("keypool: redis down")
	}
	rctx, cancel := context.WithTimeout(ctx, s.p.pol.Load().readTimeout)
	defer cancel()
	us, err := keyPaceScript.Run(rctx, s.rdb, []string{paceHashKey(s.prefix, backend)}, keyID,
		interval.Microseconds(), paceTTL.Milliseconds(), max(ahead, 0).Microseconds()).Int64()
	if err != nil {
		if ctx.Err() == nil {
			s.fail("pace", err)
		}
		return false, 0, fmt.Errorf("keypool: key pace: %w", err)
	}
	if us < 0 {
		return false, time.Duration(-us) * time.Microsecond, nil
	}
	return true, time.Duration(us) * time.Microsecond, nil
}

// soonestPacedLocked is, when no key can take req now only because of its
// pace, the key whose slot comes soonest and how far ahead it is. Caller
// holds kp.mu; in.pacing is set.
//
// A paced key whose provider said no request remains until its window
// resets has its slot there, if that is later than its pace's: booked, the
// request waits for the room the provider named instead of being refused
// at once (two calls on a key of one a second, the second picked just
// after the first's answer), and the key's pace moves on from there, so
// the waiters after it are spaced, not released together at the reset.
func (kp *KeyPool) soonestPacedLocked(in *pickInput, req *PickRequest) (best *keyState, wait time.Duration, ok bool) {
	in.pacing = false
	defer func() { in.pacing, in.slotAt = true, time.Time{} }()
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 || (req.Key != "" && k.cfg.ID != req.Key) {
			continue
		}
		slot := k.paceUntil
		if at := k.roomAt(); at.After(slot) && at.After(in.now) && k.paceInterval() > 0 {
			slot = at
		}
		if !in.now.Before(slot) {
			continue
		}
		in.slotAt = slot
		if kp.eligible(in, req, k) {
			if d := slot.Sub(in.now); !ok || d < wait {
				best, wait, ok = k, d, true
			}
		}
	}
	return best, wait, ok
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
