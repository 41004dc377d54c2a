package subkey

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sweeping finished keys.
//
// A swarm mints a key per worker per run, and nothing deleted them: the
// hash every replica reloads each minute (and on every reconnect) grew
// with every run. On each full reload a replica deletes the keys revoked
// or expired more than the retention ago (subkeys.retention), a bounded
// number per pass. A key is deleted only if it is still what the replica
// read (an update in between keeps it), and the deletion is announced like
// any change. The keys a deleted minter minted stay refused: a minter that
// is gone counts as revoked (minterRevoked).

// sweepBatch bounds the keys one reload deletes.
const sweepBatch = 500

// sweepScript deletes field ARGV[1] of KEYS[1] if it still holds ARGV[2],
// and announces the id on channel ARGV[3].
var sweepScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
`)

// SetRetention sets how long a revoked or expired key is kept before a
// reload deletes it; 0 (the default of a bare Store) keeps every key.
func (s *Store) SetRetention(d time.Duration) { s.retention.Store(int64(d)) }

// finished reports whether k was revoked or expired before cutoff.
func finished(k *Key, cutoff time.Time) bool {
	switch {
	case k.Revoked:
		return k.UpdatedAt.Before(cutoff)
	case !k.ExpiresAt.IsZero():
		return k.ExpiresAt.Before(cutoff)
	}
	return false
}

// sweep deletes up to sweepBatch of the keys in all (id -> raw, as one
// reload read them) that finished before the retention.
func (s *Store) sweep(ctx context.Context, all map[string]string, keys map[string]*Key) {
	keep := time.Duration(s.retention.Load())
	if keep <= 0 {
		return
	}
	cutoff := s.now().Add(-keep)
	n := 0
	for id, k := range keys {
		if n == sweepBatch || ctx.Err() != nil {
			return
		}
		if !finished(k, cutoff) {
			continue
		}
		done, err := sweepScript.Run(ctx, s.rdb, []string{s.hashKey()}, id, all[id], s.channel()).Int()
		if err != nil {
			s.log.Warn("sub-key sweep", "id", id, "err", err)
			return
		}
		if done == 1 {
			s.cache.remove(id)
			n++
		}
	}
	if n > 0 {
		s.log.Info("sub-keys deleted after their retention", "count", n, "retention", keep)
	}
}

// decodeAll reads a reload's raw keys; unreadable ones are logged and
// left out.
func (s *Store) decodeAll(all map[string]string) map[string]*Key {
	keys := make(map[string]*Key, len(all))
	for id, raw := range all {
		var k Key
		if err := json.Unmarshal([]byte(raw), &k); err != nil {
			s.log.Warn("sub-key unreadable", "id", id, "err", err)
			continue
		}
		keys[id] = &k
	}
	return keys
}
