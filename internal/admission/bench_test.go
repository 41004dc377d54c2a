package admission

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// BenchmarkAdmitNoWait is the hot path with queueing on and capacity
// there: one Admit that is admitted at once (local order).
func BenchmarkAdmitNoWait(b *testing.B) {
	q := New(Options{})
	capacity := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	req := Request{Scope: "relay-a", Tenant: "t", Weight: 1, MaxWait: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if !q.Admit(context.Background(), req, capacity).Admitted {
			b.Fatal("not admitted")
		}
	}
}

// BenchmarkRedisStep is one order decision against a real redis-server:
// the Lua step's round trip (admitted at once, paced, nobody waiting).
func BenchmarkRedisStep(b *testing.B) {
	srv := redistest.Start(b)
	o := NewRedisOrder(srv.Client(), "bench:")
	p := Pace{Rate: 1e9, Burst: 1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		t := &Ticket{ID: strconv.Itoa(i), Scope: "relay-a", Tenant: "t", Weight: 1, Deadline: time.Now().Add(time.Second)}
		if d, err := o.Step(context.Background(), t, nil, p, true); err != nil || !d.Admitted {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// BenchmarkAdmitRedisDefault is what the default config (queue and pace on)
// adds to a request whose keys are ready: the whole admission against a
// real redis-server, with the shared order and sessions (a session under
// way, as an agent's later calls are): the session's look-up, the order's
// step and the session's touch.
func BenchmarkAdmitRedisDefault(b *testing.B) {
	srv := redistest.Start(b)
	q := New(Options{ReplicaID: "r0", Order: NewRedisOrder(srv.Client(), "bench:"), FailOpen: true,
		StepTimeout: time.Second, Sessions: NewRedisSessions(srv.Client(), "bench:"), SessionIdle: 5 * time.Second})
	capacity := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	req := Request{Scope: "relay-a", Tenant: "t", Weight: 1, MaxWait: 10 * time.Second, Session: "t/session/s1"}
	b.ReportAllocs()
	for b.Loop() {
		if !q.Admit(context.Background(), req, capacity).Admitted {
			b.Fatal("not admitted")
		}
	}
}
