package admission

import (
	"context"
	"sync"
	"time"
)

// LocalOrder is the order within one process: tests, a single replica, and
// the fail-open fallback while Redis is unreachable. Same semantics as
// RedisOrder.
type LocalOrder struct {
	mu     sync.Mutex
	now    func() time.Time
	scopes map[string]*localScope
}

type localScope struct {
	v, tat  float64 // virtual time; GCRA theoretical arrival (ms)
	ttat    float64 // the token GCRA's
	fin     map[string]float64
	tickets map[string]localEntry
}

type localEntry struct {
	tag      float64
	class    int
	deadline time.Time
	tenant   string
	cost     float64 // 1/weight: what joining charged the tenant
}

// NewLocalOrder returns an empty order.
func NewLocalOrder() *LocalOrder {
	return &LocalOrder{now: time.Now, scopes: map[string]*localScope{}}
}

func (o *LocalOrder) scope(name string) *localScope {
	s := o.scopes[name]
	if s == nil {
		s = &localScope{fin: map[string]float64{}, tickets: map[string]localEntry{}}
		o.scopes[name] = s
	}
	return s
}

// Step implements Order.
func (o *LocalOrder) Step(_ context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	nowMs := float64(now.UnixMicro()) / 1000
	s := o.scope(t.Scope)
	for id, e := range s.tickets {
		if now.After(e.deadline) {
			s.drop(id, e) // a dead waiter's
		}
	}
	me, joined := s.tickets[t.ID]
	if !joined {
		finish := max(s.v, s.fin[t.Tenant]) + 1/t.Weight
		s.fin[t.Tenant] = finish
		if ready && len(s.tickets) == 0 {
			if wait, next, nextT := gcraWait(s.tat, s.ttat, nowMs, p, t.Tokens); wait == 0 {
				s.tat, s.ttat, s.v = next, nextT, finish
				return Decision{Admitted: true}, nil
			}
		}
		me = localEntry{tag: float64(t.Class)*classSpan + finish, class: t.Class, deadline: t.Deadline, tenant: t.Tenant, cost: 1 / t.Weight}
		s.tickets[t.ID] = me
	}
	ahead := s.ahead(t.ID, me)
	d := Decision{Joined: true, Ahead: ahead, Tag: me.tag}
	if ahead > 0 || !ready {
		return d, nil
	}
	if d.Wait = s.admit(t, me, p, nowMs); d.Wait > 0 {
		return d, nil
	}
	d = Decision{Admitted: true, Tag: me.tag}
	// The tickets after it, while each is first and the pace allows.
	for _, n := range next {
		e, ok := s.tickets[n.ID]
		if !ok || s.ahead(n.ID, e) > 0 || s.admit(n, e, p, nowMs) > 0 {
			break
		}
		d.Next++
	}
	return d, nil
}

// ahead is how many tickets are before ticket id (entry e).
func (s *localScope) ahead(id string, e localEntry) int64 {
	var n int64
	for oid, o := range s.tickets {
		if o.tag < e.tag || (o.tag == e.tag && oid < id) {
			n++
		}
	}
	return n
}

// admit takes joined ticket t out of the order when the pace allows;
// otherwise it returns the pace's wait.
func (s *localScope) admit(t *Ticket, e localEntry, p Pace, nowMs float64) time.Duration {
	wait, next, nextT := gcraWait(s.tat, s.ttat, nowMs, p, t.Tokens)
	if wait > 0 {
		return wait
	}
	s.tat, s.ttat = next, nextT
	delete(s.tickets, t.ID)
	s.v = max(s.v, e.tag-float64(e.class)*classSpan)
	return 0
}

// drop takes out a ticket that leaves unadmitted and gives its tenant back
// what joining charged (doc.go: abandoned tickets).
func (s *localScope) drop(id string, e localEntry) {
	delete(s.tickets, id)
	s.fin[e.tenant] = max(s.v, s.fin[e.tenant]-e.cost)
}

// Leave implements Order.
func (o *LocalOrder) Leave(_ context.Context, t *Ticket) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.scope(t.Scope)
	if e, ok := s.tickets[t.ID]; ok {
		s.drop(t.ID, e)
	}
	return nil
}

// Depth implements Order.
func (o *LocalOrder) Depth(_ context.Context, scope string) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int64(len(o.scope(scope).tickets)), nil
}
