package keypool

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pickers sharing a key.
//
// A key's provider states what remains of its window on each answer, and
// every replica picking that key reads its own answers only: each may send
// its share of what remains (inflight.go). The share was a fixed half, right
// for two replicas; with six, the first window of a cold key took three
// times what remained. Each replica that picks keys now stamps itself in a
// sorted set in Redis on every poll (<prefix>keypool:replicas, member the
// replica id, score the time), drops the stamps older than replicaStale and
// counts the rest. Control-plane-only replicas, which run the pools without
// picking, do not stamp themselves.

// replicaStale is how long a replica counts after its last stamp: a few
// polls (sync_interval, 1 s by default), so a replica that stopped drops
// out within seconds, and one late poll does not.
func replicaStale(syncInterval time.Duration) time.Duration {
	return max(3*syncInterval, 5*time.Second)
}

// countReplicas stamps this replica (when it has picked) and stores how
// many replicas pick keys. On an error the last count stands.
func (s *syncer) countReplicas(ctx context.Context) {
	now := s.p.clock.Now()
	stale := replicaStale(s.p.pol.Load().syncInterval)
	var n *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.picked.Load() {
			p.ZAdd(ctx, s.replicasKey, redis.Z{Score: float64(now.UnixMilli()), Member: s.replica})
		}
		p.ZRemRangeByScore(ctx, s.replicasKey, "-inf", strconv.FormatInt(now.Add(-stale).UnixMilli(), 10))
		p.PExpire(ctx, s.replicasKey, 10*stale)
		n = p.ZCard(ctx, s.replicasKey)
		return nil
	})
	if err != nil {
		return
	}
	s.replicas.Store(n.Val())
}

// leaveReplicas takes this replica's stamp out when it stops, so the
// others' shares grow at once rather than after replicaStale.
func (s *syncer) leaveReplicas() {
	if !s.picked.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = s.rdb.ZRem(ctx, s.replicasKey, s.replica).Err()
}

// replicas is how many replicas share what a key has left, at least 2:
// without Redis, or with fewer counted, a replica keeps half for another.
func (p *Pools) replicas() int {
	if p.sync == nil {
		return 2
	}
	return max(int(p.sync.replicas.Load()), 2)
}
