package admin

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
)

// fixedLeft answers what remains of the budgets above a key, and records
// what it was asked.
type fixedLeft struct {
	mu     sync.Mutex
	left   float64
	err    error
	parent []string
}

func (f *fixedLeft) Left(_ context.Context, tenant, parent string) (float64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parent = append(f.parent, tenant+"/"+parent)
	return f.left, true, f.err
}

// A new key's budget is carved out of what remains of the budgets above
// it: a minter asking more than its own budget has left is refused 403
// (a right it lacks), the admin asking more than the tenant has left 400;
// when that cannot be read the key API answers 503 and stores nothing.
func TestKeyBudgetCarvedFromWhatRemains(t *testing.T) {
	left := &fixedLeft{left: 100}
	e := startKeyAPI(t, func(o *Options) { o.BudgetLeft = left })
	minterID, minter := e.create(t, testAdminToken, map[string]any{"tenant": "team-red", "minter": true,
		"budget": map[string]any{"amount": 10, "period": "month", "hard_cap": true}})
	left.mu.Lock()
	left.left = 5 // the minter spent 5 of its 10
	left.mu.Unlock()
	budget := func(amount float64) map[string]any {
		return map[string]any{"budget": map[string]any{"amount": amount, "period": "run", "hard_cap": true}}
	}
	for _, tc := range []struct {
		name, token string
		body        map[string]any
		status      int
	}{
		{"minter within what is left", minter, budget(4), http.StatusCreated},
		{"minter beyond what is left", minter, budget(6), http.StatusForbidden},
		{"admin beyond what the tenant has left", testAdminToken, map[string]any{"tenant": "team-red", "budget": budget(6)["budget"]}, http.StatusBadRequest},
		{"no budget", minter, map[string]any{}, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.store.List("team-red", nil))
			a := e.do(t, http.MethodPost, "/v1/keys", tc.token, tc.body)
			if a.status != tc.status {
				t.Fatalf("%d %s, want %d", a.status, a.raw, tc.status)
			}
			stored := len(e.store.List("team-red", nil)) - before
			if tc.status == http.StatusCreated {
				if stored != 1 {
					t.Fatalf("%d keys stored", stored)
				}
				return
			}
			if a.field() != "budget.amount" || stored != 0 {
				t.Fatalf("field %q, %d keys stored: %s", a.field(), stored, a.raw)
			}
		})
	}
	left.mu.Lock()
	asked := append([]string(nil), left.parent...)
	left.err = errors.New("redis down")
	left.mu.Unlock()
	want := []string{"team-red/", "team-red/" + minterID, "team-red/" + minterID, "team-red/"}
	if len(asked) != len(want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	for i := range want {
		if asked[i] != want[i] {
			t.Fatalf("asked %v, want %v", asked, want)
		}
	}
	if a := e.do(t, http.MethodPost, "/v1/keys", minter, budget(1)); a.status != http.StatusServiceUnavailable {
		t.Fatalf("budget unreadable: %d %s", a.status, a.raw)
	}
}

// A key's budget grown by an update is checked like a new one for the
// growth: its current budget was carved at creation, so only what it
// grows by needs room above it; lowering always passes, and a budget for
// another period is carved whole.
func TestKeyBudgetGrowthCarvedFromWhatRemains(t *testing.T) {
	left := &fixedLeft{left: 100}
	e := startKeyAPI(t, func(o *Options) { o.BudgetLeft = left })
	id, _ := e.create(t, testAdminToken, map[string]any{"tenant": "team-red",
		"budget": map[string]any{"amount": 10, "period": "month", "hard_cap": true}})
	left.mu.Lock()
	left.left = 5 // what the tenant has left
	left.mu.Unlock()
	budget := func(amount float64, period string) map[string]any {
		return map[string]any{"budget": map[string]any{"amount": amount, "period": period, "hard_cap": true}}
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		want   float64 // the stored amount after
	}{
		{"grows by 4 of the 5 left", budget(14, "month"), http.StatusOK, 14},
		{"grows by 6 of the 5 left", budget(20, "month"), http.StatusBadRequest, 14},
		{"lowered", budget(3, "month"), http.StatusOK, 3},
		{"another period, carved whole: 6 of 5", budget(6, "day"), http.StatusBadRequest, 3},
		{"another period within what is left", budget(5, "day"), http.StatusOK, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(t, http.MethodPatch, "/v1/keys/"+id, testAdminToken, tc.body)
			if a.status != tc.status {
				t.Fatalf("%d %s, want %d", a.status, a.raw, tc.status)
			}
			if tc.status != http.StatusOK && a.field() != "budget.amount" {
				t.Fatalf("field %q: %s", a.field(), a.raw)
			}
			k, ok := e.store.Cached(id)
			if !ok || k.Budget == nil || k.Budget.Amount != tc.want {
				t.Fatalf("stored budget %+v, want amount %v", k.Budget, tc.want)
			}
		})
	}
}
