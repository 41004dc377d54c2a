package reserve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// 200 concurrent requests from 3 replicas against a 10,000 TPM limit, each
// reserving 100 prompt + 50 output tokens: exactly floor(10000/150) = 66 are
// admitted, the sum held never exceeds the limit, and settling refunds
// exactly reserved-actual.
func TestConcurrentReserveNoOvershoot(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	rs := replicas(t, srv, cfg, 3, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const n, limit, per = 200, 10000, 150
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []Reservation
		refused  atomic.Int64
		start    = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := rs[i%3].Reserve(ctx, Request{RequestID: fmt.Sprintf("req-%d", i), Tenant: "acme",
				Model: "big", PromptTokens: 100, MaxOutputTokens: 50, Price: price})
			var le *LimitError
			switch {
			case err == nil && res.Degraded:
				t.Errorf("admitted unreserved (redis too slow?)")
			case err == nil:
				mu.Lock()
				admitted = append(admitted, res)
				mu.Unlock()
			case errors.As(err, &le):
				if le.Scope != ScopeTenant || le.Limit != limit || le.Requested != per || le.RetryAfter <= 0 || le.RetryAfter > 2*time.Second || le.Window != time.Minute {
					t.Errorf("refusal = %+v", le)
				}
				refused.Add(1)
			default:
				t.Errorf("reserve: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got, want := len(admitted), limit/per; got != want {
		t.Fatalf("admitted %d, want exactly %d (refused %d)", got, want, refused.Load())
	}
	rdb := srv.Client()
	if h := held(t, rdb, cfg, "acme", ScopeTenant, ""); h != int64(len(admitted)*per) || h > limit {
		t.Fatalf("held %d, want %d <= %d", h, len(admitted)*per, limit)
	}

	// Settle concurrently with 80 prompt + 20 completion tokens: 50 tokens
	// refunded each; settling twice changes nothing.
	for i, res := range admitted {
		wg.Add(2)
		for range 2 {
			go func() {
				defer wg.Done()
				if err := rs[i%3].Settle(ctx, res, pricing.Usage{PromptTokens: 80, CompletionTokens: 20}, 0); err != nil {
					t.Errorf("settle: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	if h, want := held(t, rdb, cfg, "acme", ScopeTenant, ""), int64(len(admitted)*100); h != want {
		t.Fatalf("after settle held %d, want %d", h, want)
	}
	// The refunded room admits floor((10000-6600)/150) = 22 more.
	more := 0
	for i := range 40 {
		if _, err := rs[0].Reserve(ctx, Request{RequestID: fmt.Sprintf("more-%d", i), Tenant: "acme",
			Model: "big", PromptTokens: 100, MaxOutputTokens: 50, Price: price}); err == nil {
			more++
		}
	}
	if more != 22 {
		t.Fatalf("after refunds admitted %d more, want 22", more)
	}
}

// The bound: when providers report more than was reserved (prompt estimate
// too low), the overshoot is at most the sum of the excesses of the
// admitted requests, and no new request is admitted while over the limit.
func TestOvershootBound(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	rs := replicas(t, srv, cfg, 3, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const limit, per, excess = 10000, 150, 30
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []Reservation
	)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := rs[i%3].Reserve(ctx, Request{RequestID: fmt.Sprintf("o-%d", i), Tenant: "acme", Model: "big",
				PromptTokens: 100, MaxOutputTokens: 50, Price: price})
			if err == nil && res.Degraded {
				t.Errorf("admitted unreserved (redis too slow?)")
			}
			if err == nil {
				mu.Lock()
				admitted = append(admitted, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// All admitted requests were in flight together; each prompt was really
	// 130 tokens.
	for i, res := range admitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rs[i%3].Settle(ctx, res, pricing.Usage{PromptTokens: 100 + excess, CompletionTokens: 50}, 0); err != nil {
				t.Errorf("settle: %v", err)
			}
		}()
	}
	wg.Wait()
	h := held(t, srv.Client(), cfg, "acme", ScopeTenant, "")
	bound := int64(limit + len(admitted)*excess)
	if h > bound || h <= limit {
		t.Fatalf("held %d: want above the limit %d (the test must overshoot) and within the bound %d", h, limit, bound)
	}
	t.Logf("N=%d admitted, held %d, limit %d, bound %d", len(admitted), h, limit, bound)
	if _, err := rs[0].Reserve(ctx, Request{RequestID: "after", Tenant: "acme", Model: "big", PromptTokens: 1, MaxOutputTokens: 1}); err == nil {
		t.Fatal("admitted while over the limit")
	}
}

func TestSettleIdempotentAndRefundExact(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 1, time.Minute)[0]
	rdb := srv.Client()
	ctx := t.Context()
	tests := []struct {
		name            string
		prompt, maxOut  int
		actual          pricing.Usage
		release         bool
		wantHeldTenant  int64
		wantHeldModel   int64
		wantAfterSecond int64
	}{
		{name: "refund the difference", prompt: 1000, maxOut: 500, actual: pricing.Usage{PromptTokens: 900, CompletionTokens: 100}, wantHeldTenant: 1000, wantHeldModel: 1000},
		{name: "actual above reserved is charged", prompt: 100, maxOut: 100, actual: pricing.Usage{PromptTokens: 150, CompletionTokens: 100}, wantHeldTenant: 250, wantHeldModel: 250},
		{name: "total only", prompt: 100, maxOut: 100, actual: pricing.Usage{TotalTokens: 42}, wantHeldTenant: 42, wantHeldModel: 42},
		{name: "release refunds all", prompt: 500, maxOut: 500, release: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := held(t, rdb, cfg, "acme", ScopeTenant, "")
			beforeModel := held(t, rdb, cfg, "acme", ScopeModel, "small")
			res, err := r.Reserve(ctx, Request{RequestID: fmt.Sprintf("s-%d", i), Tenant: "acme", Model: "small",
				PromptTokens: tc.prompt, MaxOutputTokens: tc.maxOut, Price: price})
			if err != nil {
				t.Fatal(err)
			}
			if got := held(t, rdb, cfg, "acme", ScopeTenant, "") - before; got != int64(tc.prompt+tc.maxOut) {
				t.Fatalf("reserved %d, want %d", got, tc.prompt+tc.maxOut)
			}
			for range 2 { // the second call is a duplicate
				if tc.release {
					err = r.Release(ctx, res)
				} else {
					err = r.Settle(ctx, res, tc.actual, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := held(t, rdb, cfg, "acme", ScopeTenant, "") - before; got != tc.wantHeldTenant {
					t.Fatalf("tenant holds %d after settle, want %d", got, tc.wantHeldTenant)
				}
				if got := held(t, rdb, cfg, "acme", ScopeModel, "small") - beforeModel; got != tc.wantHeldModel {
					t.Fatalf("model holds %d after settle, want %d", got, tc.wantHeldModel)
				}
			}
			// Release after settle and a repeated Reserve do nothing.
			if err := r.Release(ctx, res); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reserve(ctx, Request{RequestID: res.RequestID, Tenant: "acme", Model: "small", PromptTokens: 5}); err != nil {
				t.Fatal(err)
			}
			if got := held(t, rdb, cfg, "acme", ScopeTenant, "") - before; got != tc.wantHeldTenant {
				t.Fatalf("tenant holds %d after release and re-reserve, want %d", got, tc.wantHeldTenant)
			}
		})
	}
}

func TestDuplicateReserveHoldsOnce(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 1, time.Minute)[0]
	for range 3 {
		if _, err := r.Reserve(t.Context(), Request{RequestID: "dup", Tenant: "acme", Model: "big", PromptTokens: 10, MaxOutputTokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if h := held(t, srv.Client(), cfg, "acme", ScopeTenant, ""); h != 20 {
		t.Fatalf("held %d, want 20", h)
	}
}

// A model scope that refuses leaves the tenant scope untouched: the script
// admits into all scopes or none.
func TestAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 1, time.Minute)[0]
	_, err := r.Reserve(t.Context(), Request{RequestID: "x", Tenant: "acme", Model: "small", PromptTokens: 3000, MaxOutputTokens: 1})
	var le *LimitError
	if !errors.As(err, &le) || le.Scope != ScopeModel || le.Model != "small" || le.RetryAfter != 0 {
		t.Fatalf("err = %v, want a never-fits model-scope LimitError", err)
	}
	if h := held(t, srv.Client(), cfg, "acme", ScopeTenant, ""); h != 0 {
		t.Fatalf("tenant scope holds %d after a refusal, want 0", h)
	}
}

// Reservations that are never settled expire after reservation_ttl; settled
// tokens stop counting one window after admission.
func TestReservationsExpire(t *testing.T) {
	srv := redistest.Start(t)
	const ttl, window = 300 * time.Millisecond, 200 * time.Millisecond
	cfg := testConfig(t, srv.Addr, "300ms", "")
	r := replicas(t, srv, cfg, 1, window)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	waitAdmitted := func(req Request) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			_, err := r.Reserve(ctx, req)
			if err == nil {
				return time.Since(start)
			}
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("reserve: %v", err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("never admitted: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// Never settled: the crashed request's hold frees itself after the TTL.
	start := time.Now()
	if _, err := r.Reserve(ctx, Request{RequestID: "crashed", Tenant: "tpmonly", PromptTokens: 900, MaxOutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Reserve(ctx, Request{RequestID: "next", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1})
	var le *LimitError
	if !errors.As(err, &le) || le.RetryAfter <= 0 || le.RetryAfter > ttl {
		t.Fatalf("err = %v, want a LimitError with 0 < RetryAfter <= %s", err, ttl)
	}
	waitAdmitted(Request{RequestID: "next", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1})
	if el := time.Since(start); el < ttl-50*time.Millisecond {
		t.Fatalf("admitted after %s, before the TTL %s", el, ttl)
	}

	// Settled: 600 actual tokens count for one window after admission.
	waitAdmitted(Request{RequestID: "warm", Tenant: "tpmonly", PromptTokens: 1, MaxOutputTokens: 1}) // ensure "next" is gone
	res, err := r.Reserve(ctx, Request{RequestID: "settled", Tenant: "tpmonly", PromptTokens: 500, MaxOutputTokens: 100})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	admittedAt := time.Now()
	if err := r.Settle(ctx, res, pricing.Usage{PromptTokens: 500, CompletionTokens: 100}, 0); err != nil {
		t.Fatal(err)
	}
	big := Request{RequestID: "big", Tenant: "tpmonly", PromptTokens: 400, MaxOutputTokens: 50}
	waitAdmitted(big)
	if el := time.Since(admittedAt); el < window-50*time.Millisecond {
		t.Fatalf("settled tokens stopped counting after %s, before the window %s", el, window)
	}
}

func TestBudgetHardCap(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "2s", "")
	r := replicas(t, srv, cfg, 1, time.Minute)[0]
	rdb := srv.Client()
	ctx := t.Context()
	// 1000 prompt + 1000 output at 1 and 2 per MTok: 0.003 each, cap 0.01.
	req := func(id string) Request {
		return Request{RequestID: id, Tenant: "capped", Model: "big", PromptTokens: 1000, MaxOutputTokens: 1000, Price: price}
	}
	var rs []Reservation
	for i := range 3 {
		res, err := r.Reserve(ctx, req(fmt.Sprint("b", i)))
		if err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		if res.Cost != pricing.FromFloat(0.003) {
			t.Fatalf("reserved cost %s, want 0.003", res.Cost)
		}
		rs = append(rs, res)
	}
	_, err := r.Reserve(ctx, req("b3"))
	var be *budget.ExceededError
	if !errors.As(err, &be) || be.Held != pricing.FromFloat(0.009) || be.Spent != 0 || be.Cap != pricing.FromFloat(0.01) ||
		be.Requested != pricing.FromFloat(0.003) || be.RetryAfter <= 0 || be.RetryAfter > 2*time.Second {
		t.Fatalf("err = %v (%+v), want ExceededError holding 0.009 of 0.01", err, be)
	}
	// One finishes at a real cost of 0.001, recorded in the ledger first:
	// 0.001 + 0.006 + 0.003 fits.
	l := ledger.New(rdb, ledger.Options{KeyPrefix: cfg.Redis.KeyPrefix, Logger: quietLog()})
	record := func(id string, cost float64) {
		t.Helper()
		if err := l.Record(ctx, ledger.Entry{RequestID: id, Tenant: "capped", Model: "big", Cost: pricing.FromFloat(cost)}); err != nil {
			t.Fatal(err)
		}
	}
	record("b0", 0.001)
	if err := r.Settle(ctx, rs[0], pricing.Usage{PromptTokens: 1000}, pricing.FromFloat(0.001)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reserve(ctx, req("b4")); err != nil {
		t.Fatalf("after settle: %v", err)
	}
	// Spend reaches the cap: refused until next month.
	record("elsewhere", 0.0095)
	untilNext := budget.UntilNextMonth(time.Now())
	_, err = r.Reserve(ctx, Request{RequestID: "b5", Tenant: "capped", Model: "big", PromptTokens: 1, Price: price})
	if !errors.As(err, &be) || be.Spent != pricing.FromFloat(0.0105) || be.RetryAfter > untilNext || be.RetryAfter < untilNext-5*time.Second {
		t.Fatalf("err = %v (%+v), want ExceededError until next month", err, be)
	}
}

func TestFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name, modes, tenant string
		wantDegraded        bool
		wantUnavailable     bool
	}{
		{"tpm open", "{reservation: open, budget: closed}", "tpmonly", true, false},
		{"tpm closed", "{reservation: closed, budget: open}", "tpmonly", false, true},
		{"budget closed wins", "{reservation: open, budget: closed}", "acme", false, true},
		{"both open", "{reservation: open, budget: open}", "acme", true, false},
		{"no limits never asks redis", "{reservation: closed, budget: closed}", "free", false, false},
		{"tpm left to the rate-limit service", "{reservation: closed, budget: closed}\naccounting: {token_limits: ratelimit}", "tpmonly", false, false},
	}
	srv.Stop()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, srv.Addr, "2s", "failure_modes: "+tc.modes)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			r := New(c, cfg, Options{Logger: quietLog()})
			res, err := r.Reserve(t.Context(), Request{RequestID: "f", Tenant: tc.tenant, Model: "big", PromptTokens: 1})
			if got := errors.Is(err, ErrUnavailable); got != tc.wantUnavailable {
				t.Fatalf("err = %v, want unavailable %v", err, tc.wantUnavailable)
			}
			if !tc.wantUnavailable && err != nil {
				t.Fatal(err)
			}
			if res.Degraded != tc.wantDegraded {
				t.Fatalf("degraded = %v, want %v", res.Degraded, tc.wantDegraded)
			}
			if err := r.Settle(t.Context(), res, pricing.Usage{}, 0); err != nil {
				t.Fatalf("settle of an unreserved request: %v", err)
			}
		})
	}
}
