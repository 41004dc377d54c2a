package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sessions.
//
// An agent's task is a chain of calls (a planner, workers, a critic). When
// capacity is short, admitting calls in arrival order spreads it over
// every task that starts: a storm of 500 agents on keys sized for 12 saw
// 9,761 of 10,000 tasks start and fail, most at their later calls. So the
// queue knows sessions (Request.Session: the client's x-session-id, else
// the operator's admission.session_header, else the virtual key):
//
//   - a call of a session already under way (an admitted call within
//     SessionIdle) goes before any new session's call of the same class:
//     the ticket's class is 2·class for those, 2·class+1 for new ones, so
//     configured classes keep their order and tenants their weighted
//     shares within each;
//   - at most MaxSessions sessions are under way at once on a scope (0:
//     what the scope's pace can carry, pace × SessionSpan); a new session
//     over the bound waits for one to end, up to its maximum wait, then
//     gets 429 with the time until the oldest session's idle end as
//     Retry-After.
//
// The sessions under way live in Redis for every replica (SessionStore); a
// session ends when SessionIdle passes without an admitted call (clients
// do not say when a task ends). Under way is one view over every scope (a
// task's worker calls go first once its planner call was admitted), but
// each scope's bound counts only the sessions with an admitted call (or a
// start) on that scope: the bound is the scope's pace × SessionSpan, and
// counted against every scope's sessions a slow model's bound was spent by
// a fast model's sessions.

// SessionStore tracks the sessions under way.
type SessionStore interface {
	// Begin reports whether session is under way on any scope (active),
	// else starts it on scope when fewer than bound (0: no bound;
	// negative: none may start now) are under way there (started);
	// otherwise retry is when the oldest of them goes idle. It does not
	// renew an active session: only an admitted call does (Touch), so a
	// session whose calls are all refused ends after the idle time.
	Begin(ctx context.Context, scope, session string, bound int, idle time.Duration) (active, started bool, retry time.Duration, err error)
	// Touch marks an admitted call of session on scope, under way from now
	// also when its wait outlasted SessionIdle (its next calls must go
	// first).
	Touch(ctx context.Context, scope, session string, idle time.Duration) error
	// End removes session: its first call, on scope, was not admitted, so
	// it never got under way and must not hold a place (nor pass as under
	// way when its client retries).
	End(ctx context.Context, scope, session string) error
}

// ReasonSessions: the sessions under way already use the capacity.
const ReasonSessions Reason = "sessions_full"

// sessionClass is the ticket class of a call: sessions under way first
// within each configured class.
func sessionClass(class int, active bool) int {
	if active {
		return 2 * class
	}
	return 2*class + 1
}

// sessionBound is how many sessions may be under way on a scope paced at
// rate (requests/s): MaxSessions, else rate × SessionSpan (at least 1);
// 0 (no bound) for an unpaced scope without MaxSessions.
func (q *Queue) sessionBound(rate float64) int {
	if q.opts.MaxSessions > 0 {
		return q.opts.MaxSessions
	}
	if rate <= 0 || q.opts.SessionSpan <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(rate*q.opts.SessionSpan.Seconds())))
}

// beginSession places req in its session: it sets the ticket class, and
// decides whether a new session may start. Over the bound (MaxSessions,
// SessionSpan) a new session waits only when a place opens within
// newSessionWait, and is refused at once (429 sessions_full, Retry-After
// when one may open) instead of polling for its whole maximum wait. ok
// false: the result is the refusal.
func (q *Queue) beginSession(ctx context.Context, req *Request, capacity Capacity, start time.Time) (Result, bool) {
	for {
		_, _, pace := capacity()
		var active, started bool
		var retry time.Duration
		err := errSessionsDown
		if !q.sessionsDown() {
			sctx, cancel := context.WithTimeout(ctx, q.opts.StepTimeout)
			active, started, retry, err = q.opts.Sessions.Begin(sctx, req.Scope, req.Session, q.sessionBound(pace.Rate), q.opts.SessionIdle)
			cancel()
			if err != nil && ctx.Err() == nil {
				q.sessionsFailed(err)
			}
		}
		if err != nil {
			// The order's failure mode decides elsewhere; without the
			// sessions' state the call is treated as under way.
			active, started = true, false
		}
		if active || started {
			req.Class = sessionClass(req.Class, active)
			req.underWay, req.newSession = active, started
			req.MaxWait -= time.Since(start)
			return Result{}, true
		}
		left := min(req.MaxWait, newSessionWait) - time.Since(start)
		if left <= 0 || retry > left {
			// No place opens within the wait: refuse now, truthfully.
			return q.refuse(*req, ReasonSessions, retry, start), false
		}
		if req.OnWait != nil {
			req.OnWait()
			req.OnWait = nil
		}
		if err := sleepCtx(ctx, min(max(retry, q.opts.Poll), left, sessionPoll)); err != nil {
			return q.refuse(*req, ReasonCancelled, 0, start), false
		}
	}
}

// gated is the capacity a new session's first call sees: none while the
// sessions under way are behind (backlog), so the call waits in its place
// (behind every call under way, ahead of later new sessions) and is
// admitted when they keep up again. Admitting new tasks at one model's pace
// while another model's calls of the tasks under way wait only spreads
// the capacity over more tasks than it can finish: in the storm of issue
// 27 tasks admitted at the planner's pace died in the workers' queue.
func (q *Queue) gated(capacity Capacity) Capacity {
	return func() (bool, time.Duration, Pace) {
		ready, ra, pace := capacity()
		if b := q.backlog(time.Now()); ready && b > 0 {
			return false, max(ra, min(b, q.opts.Poll)), pace
		}
		return ready, ra, pace
	}
}

// errSessionsDown: the session store failed within the last
// orderDownFor, and is not asked until then.
var errSessionsDown = errors.New("admission: sessions: unavailable a moment ago")

// sessionsDown reports whether the session store failed within the last
// orderDownFor: while it did, calls are treated as under way without
// asking it (each would otherwise wait out a step timeout of its own).
func (q *Queue) sessionsDown() bool { return time.Now().UnixNano() < q.sessionsDownUntil.Load() }

// sessionsFailed notes a failure of the session store.
func (q *Queue) sessionsFailed(err error) {
	q.sessionsDownUntil.Store(time.Now().Add(orderDownFor).UnixNano())
	q.sessionsWarn.warn(q.opts.Logger, "admission: sessions unavailable", err)
}

// endSession forgets a session whose first call was not admitted.
func (q *Queue) endSession(req Request) {
	ctx, cancel := context.WithTimeout(context.Background(), q.opts.StepTimeout)
	defer cancel()
	if err := q.opts.Sessions.End(ctx, req.Scope, req.Session); err != nil {
		q.sessionsWarn.warn(q.opts.Logger, "admission: sessions unavailable", err)
	}
}

// newSessionWait is the longest a new session waits for a place under the
// session bound: a task that cannot start within it is better refused (its
// client retries after the Retry-After) than left polling the store.
const newSessionWait = time.Second

// sessionBacklog is how long a call of a session under way may wait on
// this replica before no new session is admitted (gated): the sessions
// under way already ask more than the capacity serves. In the storm, 1 s
// held the planner key to 87 % of its window (14.2 % of tasks completed
// with 2 s, 13.6 % with 1 s, upstream 429s below 1 % in both).
const sessionBacklog = 2 * time.Second

// backlog is, when some scope's first waiter here is a call of a session
// under way that has waited more than sessionBacklog, how long it has
// waited beyond that (at least a millisecond); else 0.
func (q *Queue) backlog(now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	worst := time.Duration(0)
	for _, s := range q.scopes {
		for _, h := range [2]waitHeap{s.shared, s.own} {
			if len(h) > 0 && h[0].req.underWay {
				worst = max(worst, now.Sub(h[0].since)-sessionBacklog)
			}
		}
	}
	if worst <= 0 {
		return 0
	}
	return max(worst, time.Millisecond)
}

// sessionPoll bounds how long a new session sleeps before asking again.
const sessionPoll = 100 * time.Millisecond

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

// LocalSessions is a SessionStore in this process (tests, one replica).
type LocalSessions struct {
	mu sync.Mutex
	// last: each session's last admitted call (or start), on any scope;
	// scopes: the same per scope, for its bound.
	last   map[string]time.Time
	scopes map[string]map[string]time.Time
	now    func() time.Time
}

// NewLocalSessions returns an empty store.
func NewLocalSessions() *LocalSessions {
	return &LocalSessions{last: map[string]time.Time{}, scopes: map[string]map[string]time.Time{}, now: time.Now}
}

// expire drops the sessions idle at now from m; oldest is the earliest
// call of those left.
func expire(m map[string]time.Time, now time.Time, idle time.Duration) (oldest time.Time) {
	for id, t := range m {
		if !now.Before(t.Add(idle)) {
			delete(m, id)
		} else if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest
}

func (s *LocalSessions) Begin(_ context.Context, scope, session string, bound int, idle time.Duration) (bool, bool, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	expire(s.last, now, idle)
	var oldest time.Time
	for name, m := range s.scopes {
		if o := expire(m, now, idle); name == scope {
			oldest = o
		}
		if len(m) == 0 {
			delete(s.scopes, name)
		}
	}
	if _, ok := s.last[session]; ok {
		// Not renewed: only an admitted call keeps a session under way.
		return true, false, 0, nil
	}
	if bound < 0 || bound > 0 && len(s.scopes[scope]) >= bound {
		if oldest.IsZero() {
			return false, false, 0, nil
		}
		return false, false, oldest.Add(idle).Sub(now), nil
	}
	s.stamp(scope, session, now)
	return false, true, 0, nil
}

// stamp records a call of session on scope at t.
func (s *LocalSessions) stamp(scope, session string, t time.Time) {
	s.last[session] = t
	m := s.scopes[scope]
	if m == nil {
		m = map[string]time.Time{}
		s.scopes[scope] = m
	}
	m[session] = t
}

func (s *LocalSessions) Touch(_ context.Context, scope, session string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stamp(scope, session, s.now()) // under way from its admitted call, also after a long wait
	return nil
}

func (s *LocalSessions) End(_ context.Context, scope, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, session)
	if m := s.scopes[scope]; m != nil {
		delete(m, session)
		if len(m) == 0 {
			delete(s.scopes, scope)
		}
	}
	return nil
}

// RedisSessions is the SessionStore every replica shares: the sorted set
// <prefix>admission:sessions, member the session, score its last admitted
// call (ms of Redis's clock), and one such set per scope,
// {<prefix>admission:sessions}:<scope>, for the scope's bound. The scope's
// hash tag is the whole name of the first, so both are in its Cluster slot
// (key_prefix holds no braces: config validation) and one script reads
// and writes them together. Every write renews the expiry of the set it
// writes, to twice the idle time: a member idles out before its set can
// expire.
type RedisSessions struct {
	rdb redis.UniversalClient
	key string
}

// NewRedisSessions returns the shared store under prefix.
func NewRedisSessions(rdb redis.UniversalClient, prefix string) *RedisSessions {
	return &RedisSessions{rdb: rdb, key: prefix + "admission:sessions"}
}

// keys are the sets of every scope and of scope.
func (s *RedisSessions) keys(scope string) []string {
	return []string{s.key, "{" + s.key + "}:" + scope}
}

// beginScript: KEYS every scope's set, scope's set; ARGV session, bound
// (-1: none may start), idle (ms). Returns {1, 0} active, {2, 0} started,
// {0, retry ms} at the bound. An active session is not renewed (only an
// admitted call, touchScript, does), so it writes nothing to renew.
var beginScript = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local idle = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - idle)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - idle)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, 0}
end
local bound = tonumber(ARGV[2])
if bound < 0 or (bound > 0 and redis.call('ZCARD', KEYS[2]) >= bound) then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not oldest[2] then return {0, 0} end
  return {0, tonumber(oldest[2]) + idle - now}
end
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, now, ARGV[1])
  redis.call('PEXPIRE', k, 2 * idle)
end
return {2, 0}
`)

// touchScript: KEYS as beginScript's; ARGV session, idle (ms).
var touchScript = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, now, ARGV[1])
  redis.call('PEXPIRE', k, 2 * tonumber(ARGV[2]))
end
return 1
`)

func (s *RedisSessions) Begin(ctx context.Context, scope, session string, bound int, idle time.Duration) (bool, bool, time.Duration, error) {
	v, err := beginScript.Run(ctx, s.rdb, s.keys(scope), session, bound, max(idle.Milliseconds(), 1)).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected answer %v", v)
	}
	if err != nil {
		return false, false, 0, fmt.Errorf("admission: sessions: %w", err)
	}
	return v[0] == 1, v[0] == 2, time.Duration(v[1]) * time.Millisecond, nil
}

func (s *RedisSessions) Touch(ctx context.Context, scope, session string, idle time.Duration) error {
	if err := touchScript.Run(ctx, s.rdb, s.keys(scope), session, max(idle.Milliseconds(), 1)).Err(); err != nil {
		return fmt.Errorf("admission: sessions: %w", err)
	}
	return nil
}

func (s *RedisSessions) End(ctx context.Context, scope, session string) error {
	keys := s.keys(scope)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.ZRem(ctx, k, session)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admission: sessions: %w", err)
	}
	return nil
}
