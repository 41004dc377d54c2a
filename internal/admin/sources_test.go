package admin

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// The key pool's snapshot converts to KeyState field for field; this stops
// compiling if the two drift apart.
func TestKeyStateConvertsFromKeypool(t *testing.T) {
	until := time.Now().Add(time.Minute)
	k := KeyState(keypool.KeyState{Backend: "b", KeyID: "k", State: "half-open", OpenUntil: until, Picks: 3})
	if k.Backend != "b" || k.KeyID != "k" || k.State != BreakerHalfOpen || !k.OpenUntil.Equal(until) || k.Picks != 3 {
		t.Errorf("converted %+v", k)
	}
}

// The queue's snapshot converts to the admin types field for field where
// the shapes match; this stops compiling if they drift apart.
func TestQueueStateConvertsFromAdmission(t *testing.T) {
	w := QueueWaiters(admission.Waiters{Tenant: "t", Class: 2, ClassName: "bulk", Count: 3})
	c := QueueCounters(admission.Counters{AdmittedAfterWait: 1, TimedOut: 2, Cancelled: 3, TooLong: 4, Full: 5, OrderDown: 6})
	if w.Tenant != "t" || w.Class != 2 || w.ClassName != "bulk" || w.Count != 3 || c.TooLong != 4 || c.OrderDown != 6 {
		t.Errorf("converted %+v %+v", w, c)
	}
}
