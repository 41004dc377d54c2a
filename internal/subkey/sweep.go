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
// reload read them) that finished before the retention. A key a minter
// of the store minted finishes with it (revoking or expiring the minter
// refuses its keys, minterRevoked), and is deleted first: a minter is
// deleted only once none of its keys is left, for a key whose minter is
// gone cannot be told from one a config key minted.
func (s *Store) sweep(ctx context.Context, all map[string]string, keys map[string]*Key) {
	keep := time.Duration(s.retention.Load())
	if keep <= 0 {
		return
	}
	cutoff := s.now().Add(-keep)
	var minted, others []string
	children := map[string]int{}
	for id, k := range keys {
		if k.Parent != "" {
			children[k.Parent]++
		}
		parent := keys[k.Parent]
		if !finished(k, cutoff) && (parent == nil || !finished(parent, cutoff)) {
			continue
		}
		if k.Parent != "" {
			minted = append(minted, id)
		} else {
			others = append(others, id)
		}
	}
	minted = minted[:min(len(minted), sweepBatch)]
	gone := s.deleteIfUnchanged(ctx, all, minted)
	for _, id := range gone {
		children[keys[id].Parent]--
	}
	var free []string // minters with no key left, and keys minted by none
	for _, id := range others {
		if children[id] == 0 && len(free) < sweepBatch-len(minted) {
			free = append(free, id)
		}
	}
	n := len(gone) + len(s.deleteIfUnchanged(ctx, all, free))
	if n > 0 {
		s.log.Info("sub-keys deleted after their retention", "count", n, "retention", keep)
	}
}

// deleteIfUnchanged runs sweepScript for each id in one pipeline (the
// script loaded first: EVALSHA in a pipeline does not fall back to EVAL)
// and returns the ids it deleted, removed from the cache.
func (s *Store) deleteIfUnchanged(ctx context.Context, all map[string]string, ids []string) []string {
	if len(ids) == 0 || ctx.Err() != nil {
		return nil
	}
	if err := sweepScript.Load(ctx, s.rdb).Err(); err != nil {
		s.log.Warn("sub-key sweep", "err", err)
		return nil
	}
	cmds := make([]*redis.Cmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = sweepScript.EvalSha(ctx, p, []string{s.hashKey()}, id, all[id], s.channel())
		}
		return nil
	})
	if err != nil {
		s.log.Warn("sub-key sweep", "err", err) // the commands that ran are read below
	}
	var gone []string
	for i, c := range cmds {
		if done, err := c.Int(); err == nil && done == 1 {
			s.cache.remove(ids[i])
			gone = append(gone, ids[i])
		}
	}
	return gone
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
