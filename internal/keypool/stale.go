package keypool

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fields of removed keys.
//
// The breaker, learned-limits and refused-share hashes have one field per
// key, and nothing removed a key's fields when a reload dropped the key:
// with keys rotated over months the hashes every replica reads on each
// breaker poll only grew. Every write of a key's shared state now also
// stamps the key (backend|key) in the sorted set <prefix>keypool:written
// with the time. Every prunePeriod a replica looks at the stamps older than
// staleAfter: a key its config still has is stamped again (it stays); a
// key it does not have loses its fields in every hash (and its slot in the
// backend's pace hash). A day without a write from any replica whose config
// has the key is far longer than any rollout, so a key only another
// replica's newer config has is not pruned under it while that replica
// writes. Fields written by releases that do not stamp are never pruned.

// writtenKey is the sorted set of keys' last shared writes.
func writtenKey(prefix string) string { return prefix + "keypool:written" }

const (
	// staleAfter is how long a key's shared state is kept after its last
	// write once no config has the key.
	staleAfter = 24 * time.Hour
	// prunePeriod is how often a replica prunes; pruneBatch bounds the
	// stamps one pass reads.
	prunePeriod = 10 * time.Minute
	pruneBatch  = 200
)

// stamp adds the write of backend/key's shared state to a write pipeline.
func (s *syncer) stamp(ctx context.Context, pipe redis.Pipeliner, backend, key string) {
	pipe.ZAdd(ctx, s.writtenKey, redis.Z{Score: float64(s.p.clock.Now().UnixMilli()), Member: backend + "|" + key})
}

// pruneDue reports whether a prune pass is due, and takes the turn.
func (s *syncer) pruneDue(now time.Time) bool {
	next := s.nextPrune.Load()
	if now.UnixNano() < next {
		return false
	}
	return s.nextPrune.CompareAndSwap(next, now.Add(prunePeriod).UnixNano())
}

// prune removes the shared state of keys no longer configured whose last
// write is older than staleAfter (see above).
func (s *syncer) prune(ctx context.Context) {
	now := s.p.clock.Now()
	cutoff := now.Add(-staleAfter).UnixMilli()
	old, err := s.rdb.ZRangeByScore(ctx, s.writtenKey, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(cutoff, 10), Count: pruneBatch}).Result()
	if err != nil || len(old) == 0 {
		return
	}
	_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, m := range old {
			backend, key, ok := strings.Cut(m, "|")
			if ok {
				if _, _, err := s.p.key(backend, key); err == nil {
					// Still configured here: it stays, stamped again.
					pipe.ZAdd(ctx, s.writtenKey, redis.Z{Score: float64(now.UnixMilli()), Member: m})
					continue
				}
				pipe.HDel(ctx, s.hashKey, key)
				pipe.HDel(ctx, s.limitsKey, m)
				pipe.HDel(ctx, s.refusedKey, m)
				pipe.HDel(ctx, paceHashKey(s.prefix, backend), key)
			}
			pipe.ZRem(ctx, s.writtenKey, m)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.fail("prune", err)
	}
}
