package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// orders returns each Order implementation, fresh.
func orders(t *testing.T) map[string]func() Order {
	srv := redistest.Start(t)
	n := 0
	return map[string]func() Order{
		"local": func() Order { return NewLocalOrder() },
		"redis": func() Order { n++; return NewRedisOrder(srv.Client(), fmt.Sprintf("t%d:", n)) },
	}
}

func ticket(id, tenant string, w float64, class int) *Ticket {
	return &Ticket{ID: id, Scope: "pool", Tenant: tenant, Weight: w, Class: class, Deadline: time.Now().Add(time.Minute)}
}

// drain admits the joined tickets one by one (capacity ready, unpaced) and
// returns the admission order.
func drain(t *testing.T, o Order, ts []*Ticket) []string {
	t.Helper()
	var got []string
	left := append([]*Ticket(nil), ts...)
	for len(left) > 0 {
		progressed := false
		for i, tk := range left {
			d, err := o.Step(context.Background(), tk, nil, Pace{}, true)
			if err != nil {
				t.Fatal(err)
			}
			if d.Admitted {
				got = append(got, tk.ID)
				left = append(left[:i], left[i+1:]...)
				progressed = true
				break
			}
		}
		if !progressed {
			t.Fatalf("nobody admitted; left %d", len(left))
		}
	}
	return got
}

func TestOrderClassesFIFOAndShares(t *testing.T) {
	for name, mk := range orders(t) {
		t.Run(name, func(t *testing.T) {
			o := mk()
			var ts []*Ticket
			// Join everything while capacity is missing.
			add := func(tk *Ticket) {
				if _, err := o.Step(context.Background(), tk, nil, Pace{}, false); err != nil {
					t.Fatal(err)
				}
				ts = append(ts, tk)
			}
			for i := range 4 {
				add(ticket(fmt.Sprintf("bulk-a%d", i), "a", 3, 1))
				add(ticket(fmt.Sprintf("bulk-b%d", i), "b", 1, 1))
			}
			add(ticket("planner", "b", 1, 0))
			got := drain(t, o, ts)
			if got[0] != "planner" {
				t.Fatalf("class 0 first: %v", got)
			}
			// Weight 3 vs 1: a's first three go before b's second.
			if idx(got, "bulk-a2") > idx(got, "bulk-b1") {
				t.Errorf("shares 3:1 not kept: %v", got)
			}
			for _, p := range [][2]string{{"bulk-a0", "bulk-a1"}, {"bulk-a2", "bulk-a3"}, {"bulk-b0", "bulk-b3"}} {
				if idx(got, p[0]) > idx(got, p[1]) {
					t.Errorf("FIFO within a tenant broken (%s after %s): %v", p[0], p[1], got)
				}
			}
		})
	}
}

func idx(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestOrderPaceAndLeave(t *testing.T) {
	for name, mk := range orders(t) {
		t.Run(name, func(t *testing.T) {
			o := mk()
			p := Pace{Rate: 10, Burst: 1} // one per 100 ms
			d, err := o.Step(context.Background(), ticket("first", "a", 1, 0), nil, p, true)
			if err != nil || !d.Admitted {
				t.Fatalf("empty scope admits at once: %+v %v", d, err)
			}
			second := ticket("second", "a", 1, 0)
			d, _ = o.Step(context.Background(), second, nil, p, true)
			if d.Admitted || d.Wait <= 0 || d.Wait > 100*time.Millisecond {
				t.Fatalf("paced: want a wait in (0, 100ms], got %+v", d)
			}
			third := ticket("third", "a", 1, 0)
			d, _ = o.Step(context.Background(), third, nil, p, true)
			if d.Admitted || d.Ahead != 1 {
				t.Fatalf("third waits behind second: %+v", d)
			}
			// The second leaves (its client went away): the third is first.
			if err := o.Leave(context.Background(), second); err != nil {
				t.Fatal(err)
			}
			d, _ = o.Step(context.Background(), third, nil, p, true)
			if d.Ahead != 0 {
				t.Fatalf("a leaver frees its place at once: %+v", d)
			}
			if n, _ := o.Depth(context.Background(), "pool"); n != 1 {
				t.Fatalf("depth %d, want 1", n)
			}
		})
	}
}

// TestTokenPace: with a token rate, a ticket's cost spaces the next one
// (a 1000-token request at 1000 tokens/s holds the next about a second);
// without it the ticket goes at once.
func TestTokenPace(t *testing.T) {
	for name, mk := range orders(t) {
		t.Run(name, func(t *testing.T) {
			o := mk()
			p := Pace{Rate: 1000, Burst: 1, TokenRate: 1000}
			first := ticket("a", "x", 1, 0)
			first.Tokens = 1000
			if d, err := o.Step(context.Background(), first, nil, p, true); err != nil || !d.Admitted {
				t.Fatalf("first: %+v %v", d, err)
			}
			second := ticket("b", "x", 1, 0)
			second.Tokens = 10
			d, err := o.Step(context.Background(), second, nil, p, true)
			if err != nil || d.Admitted || d.Wait < 900*time.Millisecond || d.Wait > time.Second {
				t.Fatalf("second: %+v %v, want a wait of about 1 s", d, err)
			}
			if d, _ := o.Step(context.Background(), second, nil, Pace{}, true); !d.Admitted {
				t.Fatalf("without the token rate: %+v", d)
			}
		})
	}
}

// TestRedisOrderLead: a ticket behind the first is admitted only within its
// Lead, and then still only when the pace allows; the first keeps its
// place. (The local order serves one replica, whose first waiter is the
// first: it has no use for Lead.)
func TestRedisOrderLead(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		lead  int
		pace  Pace
		admit bool
	}{
		{"rank 1, lead 0: waits for the first", 0, Pace{}, false},
		{"rank 1, lead 1: admitted", 1, Pace{}, true},
		{"rank 1, lead 3: admitted", 3, Pace{}, true},
		{"rank 1, lead 1, paced: waits for the slot", 1, Pace{Rate: 0.001, Burst: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewRedisOrder(srv.Client(), "lead:"+tc.name+":")
			ctx := context.Background()
			if tc.pace.Rate > 0 {
				// Take the scope's one slot.
				if d, err := o.Step(ctx, ticket("before", "a", 1, 0), nil, tc.pace, true); err != nil || !d.Admitted {
					t.Fatalf("before: %+v %v", d, err)
				}
			}
			first, second := ticket("first", "a", 1, 0), ticket("second", "b", 1, 0)
			for _, tk := range []*Ticket{first, second} {
				if _, err := o.Step(ctx, tk, nil, tc.pace, false); err != nil {
					t.Fatal(err)
				}
			}
			second.Lead = tc.lead
			d, err := o.Step(ctx, second, nil, tc.pace, true)
			if err != nil || d.Admitted != tc.admit {
				t.Fatalf("second: %+v %v, want admitted %v", d, err, tc.admit)
			}
			if tc.pace.Rate > 0 && d.Wait <= 0 {
				t.Fatalf("second within its lead but paced: %+v, want the pace's wait", d)
			}
			if n, _ := o.Depth(ctx, "pool"); n != map[bool]int64{true: 1, false: 2}[tc.admit] {
				t.Fatalf("depth %d after the second's step", n)
			}
		})
	}
}

// TestOrderAbandonedTicketsRefunded: tickets that leave unadmitted (the
// waiter's Leave, or their deadline passing with nobody to leave) do not
// count against their tenant's share: tenant a, whose five requests were
// abandoned, goes next to b's first request, not after all of b's.
func TestOrderAbandonedTicketsRefunded(t *testing.T) {
	for _, how := range []string{"leave", "deadline"} {
		for name, mk := range orders(t) {
			t.Run(how+"/"+name, func(t *testing.T) {
				o := mk()
				ctx := context.Background()
				var gone []*Ticket
				for i := range 5 {
					tk := ticket(fmt.Sprintf("a-gone%d", i), "a", 1, 0)
					if how == "deadline" {
						tk.Deadline = time.Now().Add(50 * time.Millisecond)
					}
					if _, err := o.Step(ctx, tk, nil, Pace{}, false); err != nil {
						t.Fatal(err)
					}
					gone = append(gone, tk)
				}
				if how == "leave" {
					for _, tk := range gone {
						if err := o.Leave(ctx, tk); err != nil {
							t.Fatal(err)
						}
					}
				} else {
					time.Sleep(100 * time.Millisecond) // the next step sweeps them
				}
				var ts []*Ticket
				for _, tk := range []*Ticket{ticket("b0", "b", 1, 0), ticket("b1", "b", 1, 0), ticket("b2", "b", 1, 0), ticket("a5", "a", 1, 0)} {
					if _, err := o.Step(ctx, tk, nil, Pace{}, false); err != nil {
						t.Fatal(err)
					}
					ts = append(ts, tk)
				}
				if n, _ := o.Depth(ctx, "pool"); n != 4 {
					t.Fatalf("depth %d, want 4 (the abandoned tickets gone)", n)
				}
				got := drain(t, o, ts)
				if idx(got, "a5") > idx(got, "b1") {
					t.Errorf("tenant a was charged for its abandoned tickets: %v", got)
				}
			})
		}
	}
}
