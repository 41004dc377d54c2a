package keypool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Breaker sync through Redis.
//
// Every local transition (trip, quota opening, probe success, longer
// Retry-After) is written to the hash <prefix>keypool:breakers (field: key
// id) and PUBLISHed on <prefix>keypool:events. Other replicas adopt it at
// once from the subscription; the hash, polled every breaker.sync_interval,
// is the backstop for messages lost while a subscriber reconnects. A trip is
// therefore skipped by every replica within sync_interval + one Redis round
// trip (+ read_timeout when Redis is slow), usually within a millisecond.
// Newer transitions win by origin time, so clocks are assumed NTP-synced.
//
// Writes go through a bounded queue drained by one goroutine: the data path
// never waits for Redis to write. Only a retry's Pick reads Redis (the keys
// the request already failed on), and the verdicts of unanswered attempts
// (whose clients went away, unanswered.go) off the data path; both bounded
// by read_timeout and skipped while Redis is known to be down.
type syncer struct {
	p            *Pools
	rdb          redis.UniversalClient
	replica      string
	hashKey      string
	channel      string
	triedPrefix  string // key prefix of per-request failed-key sets
	cancelPrefix string // key prefix of requests whose client went away
	limitsKey    string // hash of learned limits (limits.go)
	refusedKey   string // hash of shared refused shares (refusedshare.go)
	replicasKey  string // sorted set of the replicas that pick keys (replicas.go)
	writtenKey   string // sorted set of keys' last shared writes (stale.go)
	prefix       string // Redis key prefix (the per-backend pace hashes, keypace.go)

	queue chan syncOp

	pendingMu sync.Mutex
	// pending is the latest unsent write of each kind per key ("s|" a
	// breaker state, "l|" learned limits, "r|" a refused share).
	pending map[string]syncOp
	seq     atomic.Uint64 // orders limits and refused-share writes

	down       atomic.Bool
	lastPollOK atomic.Int64 // unix nanos
	// picked: this replica has picked a key; replicas: how many replicas
	// that pick keys Redis counted on the last poll (replicas.go).
	picked   atomic.Bool
	replicas atomic.Int64
	// nextPrune (unix nanos): when this replica prunes removed keys'
	// shared state next (stale.go).
	nextPrune atomic.Int64
}

type syncOp struct {
	backend, key string
	state        *remoteState // nil: a failed-key record for req, or its cancel
	req          string
	cancel       bool   // req's client went away (Pools.Cancelled)
	limits       string // encoded learned limits of backend/key (limits.go)
	refused      string // backend/key's refused share (refusedshare.go)
	seq          uint64 // of a limits or refused write: the later one wins
}

const syncQueue = 4096

func newSyncer(p *Pools, rdb redis.UniversalClient, prefix, replica string) *syncer {
	s := &syncer{
		p: p, rdb: rdb, replica: replica,
		hashKey:      prefix + "keypool:breakers",
		channel:      prefix + "keypool:events",
		triedPrefix:  prefix + "keypool:tried:",
		cancelPrefix: prefix + "keypool:cancel:",
		limitsKey:    limitsKey(prefix),
		refusedKey:   refusedKey(prefix),
		replicasKey:  prefix + "keypool:replicas",
		writtenKey:   writtenKey(prefix),
		prefix:       prefix,
		queue:        make(chan syncOp, syncQueue),
		pending:      map[string]syncOp{},
	}
	// Grace: the remote state counts as known until the first poll is due.
	s.lastPollOK.Store(p.clock.Now().UnixNano())
	return s
}

func (s *syncer) publish(backend, key string, rs remoteState) {
	op := syncOp{backend: backend, key: key, state: &rs}
	select {
	case s.queue <- op:
	default:
		s.p.metrics.syncDropped.Inc()
		s.keepPending([]syncOp{op})
	}
}

func (s *syncer) addTried(req, key string) {
	select {
	case s.queue <- syncOp{key: key, req: req}:
	default:
		s.p.metrics.syncDropped.Inc()
	}
}

func (s *syncer) addCancel(req string) {
	select {
	case s.queue <- syncOp{req: req, cancel: true}:
	default:
		s.p.metrics.syncDropped.Inc()
	}
}

// cancelled reports, for each request, whether some replica recorded its
// client going away. Redis unreachable: nil (nothing known).
func (s *syncer) cancelled(ctx context.Context, reqs []string) []bool {
	if s.down.Load() {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(reqs))
	for i, r := range reqs {
		cmds[i] = pipe.Exists(ctx, s.cancelPrefix+r)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.fail("cancel_read", err)
		return nil
	}
	out := make([]bool, len(reqs))
	for i, c := range cmds {
		out[i] = c.Val() > 0
	}
	return out
}

// keepPending keeps the writes Redis did not take, for the next write or
// poll that finds it up: the newest breaker state, learned limits and
// refused share per key. A learned limit otherwise reaches the other
// replicas only when it changes again. Failed-key records and cancels are
// short-lived and not resent.
func (s *syncer) keepPending(ops []syncOp) {
	s.pendingMu.Lock()
	for _, op := range ops {
		id := op.sharedID()
		if id == "" {
			continue
		}
		if old, ok := s.pending[id]; ok && !op.newerThan(old) {
			continue
		}
		s.pending[id] = op
	}
	s.pendingMu.Unlock()
}

// sharedID names what op writes: a key's breaker state ("s|"), learned
// limits ("l|") or refused share ("r|"); "" for failed-key records and
// cancels.
func (op syncOp) sharedID() string {
	switch {
	case op.state != nil:
		return "s|" + op.backend + "|" + op.key
	case op.limits != "":
		return "l|" + op.backend + "|" + op.key
	case op.refused != "":
		return "r|" + op.backend + "|" + op.key
	}
	return ""
}

// newerThan orders two writes of the same sharedID.
func (op syncOp) newerThan(old syncOp) bool {
	if op.state != nil {
		return old.state.At.Before(op.state.At)
	}
	return op.seq > old.seq
}

// newestOnly drops from ops every shared write a newer one of the same
// key and kind supersedes, so the order they are written in does not
// matter (kept writes are mostly older than the queued ones, but a write
// the full queue dropped is newer).
func newestOnly(ops []syncOp) []syncOp {
	newest := make(map[string]int, len(ops))
	for i, op := range ops {
		if id := op.sharedID(); id != "" {
			if j, ok := newest[id]; !ok || op.newerThan(ops[j]) {
				newest[id] = i
			}
		}
	}
	out := ops[:0]
	for i, op := range ops {
		if id := op.sharedID(); id == "" || newest[id] == i {
			out = append(out, op)
		}
	}
	return out
}

func (s *syncer) takePending() []syncOp {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	ops := make([]syncOp, 0, len(s.pending))
	for k, op := range s.pending {
		ops = append(ops, op)
		delete(s.pending, k)
	}
	return ops
}

func (s *syncer) fail(op string, err error) {
	s.p.metrics.syncErrors.WithLabelValues(op).Inc()
	if !s.down.Swap(true) {
		s.p.log.Warn("keypool: redis breaker sync failing; using local state", "op", op, "err", err,
			"unknown_remote_state", map[bool]string{true: "open", false: "closed"}[s.p.pol.Load().failClosed])
	}
}

func (s *syncer) ok() {
	if s.down.Swap(false) {
		s.p.log.Info("keypool: redis breaker sync recovered")
	}
}

// unknownSince reports whether the remote state is unknown (no successful
// poll for 2·sync_interval + read_timeout) and since when.
func (s *syncer) unknownSince(now time.Time) (time.Time, bool) {
	pol := s.p.pol.Load()
	last := time.Unix(0, s.lastPollOK.Load())
	return last, now.Sub(last) > 2*pol.syncInterval+pol.readTimeout
}

// tried returns the key ids the request failed on, as other replicas
// recorded them. Errors leave only the local record.
func (s *syncer) tried(ctx context.Context, req string) []string {
	if s.down.Load() {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.p.pol.Load().readTimeout)
	defer cancel()
	ids, err := s.rdb.SMembers(rctx, s.triedPrefix+req).Result()
	if err != nil {
		if ctx.Err() == nil { // the caller giving up says nothing about Redis
			s.fail("tried_read", err)
		}
		return nil
	}
	return ids
}

func (s *syncer) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(3)
	go func() { defer wg.Done(); s.writer(ctx) }()
	go func() { defer wg.Done(); s.poller(ctx) }()
	go func() { defer wg.Done(); s.subscriber(ctx) }()
}

func (s *syncer) writer(ctx context.Context) {
	batch := make([]syncOp, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return
		case op := <-s.queue:
			batch = append(batch[:0], op)
		}
	drain:
		for len(batch) < cap(batch) {
			select {
			case op := <-s.queue:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		ops := batch
		if !s.down.Load() {
			if kept := s.takePending(); len(kept) > 0 {
				ops = newestOnly(append(kept, batch...))
			}
		}
		s.write(ctx, ops)
	}
}

func (s *syncer) write(ctx context.Context, ops []syncOp) {
	if len(ops) == 0 {
		return
	}
	pol := s.p.pol.Load()
	wctx, cancel := context.WithTimeout(ctx, pol.readTimeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, op := range ops {
		if op.limits != "" {
			pipe.HSet(wctx, s.limitsKey, op.backend+"|"+op.key, op.limits)
			s.stamp(wctx, pipe, op.backend, op.key)
			continue
		}
		if op.refused != "" {
			pipe.HSet(wctx, s.refusedKey, op.backend+"|"+op.key, op.refused)
			s.stamp(wctx, pipe, op.backend, op.key)
			continue
		}
		if op.state != nil {
			v := encodeState(s.replica, op.backend, op.key, *op.state)
			pipe.HSet(wctx, s.hashKey, op.key, v)
			pipe.Publish(wctx, s.channel, v)
			s.stamp(wctx, pipe, op.backend, op.key)
			continue
		}
		if op.cancel {
			pipe.Set(wctx, s.cancelPrefix+op.req, 1, cancelTTL(pol.resetGrace))
			continue
		}
		k := s.triedPrefix + op.req
		pipe.SAdd(wctx, k, op.key)
		pipe.PExpire(wctx, k, pol.triedTTL)
	}
	if _, err := pipe.Exec(wctx); err != nil {
		if ctx.Err() != nil {
			return // shutting down
		}
		s.fail("write", err)
		s.keepPending(ops)
		return
	}
	s.ok()
}

func (s *syncer) poller(ctx context.Context) {
	defer s.leaveReplicas()
	for {
		s.poll(ctx)
		t := time.NewTimer(s.p.pol.Load().syncInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *syncer) poll(ctx context.Context) {
	wasDown := s.down.Load()
	rctx, cancel := context.WithTimeout(ctx, s.p.pol.Load().readTimeout)
	defer cancel()
	all, err := s.rdb.HGetAll(rctx, s.hashKey).Result()
	if err != nil {
		if ctx.Err() == nil {
			s.fail("poll", err)
		}
		return
	}
	s.lastPollOK.Store(s.p.clock.Now().UnixNano())
	s.ok()
	for _, v := range all {
		s.apply(v, "poll")
	}
	s.pollLimits(rctx)
	s.countReplicas(rctx)
	if s.pruneDue(s.p.clock.Now()) {
		s.prune(rctx)
	}
	if wasDown {
		// Redis is back (maybe empty after a restart): republish what this
		// replica knows so others and late starters see it.
		s.republishOpen()
	}
	if ops := s.takePending(); len(ops) > 0 {
		s.write(ctx, ops)
	}
}

func (s *syncer) republishOpen() {
	now := s.p.clock.Now()
	var ops []syncOp
	for name, kp := range *s.p.pools.Load() {
		kp.mu.Lock()
		for _, k := range kp.keys {
			if k.br.open && k.br.until.After(now) {
				rs := k.exportLocked()
				ops = append(ops, syncOp{backend: name, key: k.cfg.ID, state: &rs})
			}
		}
		kp.mu.Unlock()
	}
	s.keepPending(ops)
}

func (s *syncer) subscriber(ctx context.Context) {
	ps := s.rdb.Subscribe(ctx, s.channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks Receive
	defer stop()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				continue // idle; go-redis keeps the subscription
			}
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			s.p.metrics.syncErrors.WithLabelValues("subscribe").Inc()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, s.p.pol.Load().syncInterval)
			continue
		}
		backoff = 50 * time.Millisecond
		if m, ok := msg.(*redis.Message); ok {
			s.apply(m.Payload, "pubsub")
		}
	}
}

func (s *syncer) apply(v, path string) {
	replica, backend, key, rs, ok := decodeState(v)
	if !ok || replica == s.replica {
		return
	}
	kp := s.p.pool(backend)
	if kp == nil {
		return
	}
	if kp.adopt(key, rs) {
		lag := s.p.clock.Now().Sub(rs.At)
		s.p.metrics.lag.WithLabelValues(path).Observe(max(lag, 0).Seconds())
	}
}

// encodeState: v1|replica|backend|key|open|reason|untilUnixMilli|trips|atUnixNano,
// and |secretPrint for an auth opening only: releases before it read
// exactly nine fields, so they skip auth openings (and find the refused
// key by their own 401) but keep reading every other state.
// Backend names and key ids cannot contain '|' (config validates them).
func encodeState(replica, backend, key string, rs remoteState) string {
	open := "0"
	if rs.Open {
		open = "1"
	}
	var until int64
	if !rs.Until.IsZero() {
		until = rs.Until.UnixMilli()
	}
	f := []string{"v1", replica, backend, key, open, string(rs.Reason),
		strconv.FormatInt(until, 10), strconv.Itoa(rs.Trips), strconv.FormatInt(rs.At.UnixNano(), 10)}
	if rs.Secret != "" {
		f = append(f, rs.Secret)
	}
	return strings.Join(f, "|")
}

func decodeState(v string) (replica, backend, key string, rs remoteState, ok bool) {
	f := strings.Split(v, "|")
	if len(f) != 9 && len(f) != 10 || f[0] != "v1" {
		return "", "", "", rs, false
	}
	until, err1 := strconv.ParseInt(f[6], 10, 64)
	trips, err2 := strconv.Atoi(f[7])
	at, err3 := strconv.ParseInt(f[8], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return "", "", "", rs, false
	}
	rs = remoteState{Open: f[4] == "1", Reason: Reason(f[5]), Trips: trips, At: time.Unix(0, at)}
	if until != 0 {
		rs.Until = time.UnixMilli(until)
	}
	if len(f) == 10 {
		rs.Secret = f[9]
	}
	return f[1], f[2], f[3], rs, true
}
