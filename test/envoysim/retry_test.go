package envoysim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Behaviour 3: retry decisions, the retry budget and the back-offs
// (retry_state_impl.cc, resource_manager_impl.h, backoff_strategy.cc, v1.38.0).
func TestRetries(t *testing.T) {
	zero := 0
	tests := []struct {
		name         string
		respHeader   map[string]string
		status       int
		rp           RetryPolicy
		cluster      Cluster
		wantAttempts int
		wantStatus   int
		check        func(t *testing.T, st Stats)
	}{
		{name: "retriable status code", status: 401, rp: RetryPolicy{RetryOn: []string{"retriable-status-codes"}, RetriableStatusCodes: []int{401, 403}, NumRetries: 2},
			wantAttempts: 3, wantStatus: 401},
		{name: "x-envoy-ratelimited is never retried without envoy-ratelimited", status: 429, respHeader: map[string]string{"x-envoy-ratelimited": "true"},
			rp: RetryPolicy{RetryOn: []string{"retriable-status-codes"}, RetriableStatusCodes: []int{429}, NumRetries: 2}, wantAttempts: 1, wantStatus: 429},
		{name: "envoy-ratelimited retries it", status: 429, respHeader: map[string]string{"x-envoy-ratelimited": "true"},
			rp: RetryPolicy{RetryOn: []string{"envoy-ratelimited"}, NumRetries: 1}, wantAttempts: 2, wantStatus: 429},
		{name: "retriable-headers", status: 200, respHeader: map[string]string{"x-retry-me": "1"},
			rp: RetryPolicy{RetryOn: []string{"retriable-headers"}, RetriableHeaders: []string{"x-retry-me"}, NumRetries: 1}, wantAttempts: 2, wantStatus: 200},
		{name: "budget exhausted: overflow, last response to the client", status: 503,
			rp: RetryPolicy{RetryOn: []string{"5xx"}, NumRetries: 3}, cluster: Cluster{RetryBudget: &RetryBudget{BudgetPercent: 1, MinRetryConcurrency: &zero}},
			wantAttempts: 1, wantStatus: 503, check: func(t *testing.T, st Stats) {
				if st.RetryOverflow != 1 {
					t.Errorf("overflow %d", st.RetryOverflow)
				}
			}},
		{name: "max_retries 0 without budget: overflow", status: 503, rp: RetryPolicy{RetryOn: []string{"5xx"}, NumRetries: 3},
			cluster: Cluster{MaxRetries: &zero}, wantAttempts: 1, wantStatus: 503},
		{name: "reset header above max_interval: regular back-off", status: 429, respHeader: map[string]string{"retry-after": "3600"},
			rp: RetryPolicy{RetryOn: []string{"retriable-status-codes"}, RetriableStatusCodes: []int{429}, NumRetries: 1,
				ResetHeaders: []ResetHeader{{Name: "retry-after", Format: "SECONDS"}}, RateLimitedMax: time.Second},
			wantAttempts: 2, wantStatus: 429, check: func(t *testing.T, st Stats) {
				if st.RetryBackoffRateLimited != 0 {
					t.Error("used the rate-limited back-off")
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n++
				for k, v := range tc.respHeader {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
			}))
			t.Cleanup(up.Close)
			tc.rp.BackoffBase = time.Millisecond
			cl := tc.cluster
			cl.Name, cl.Endpoints = "c", []Endpoint{{Address: strings.TrimPrefix(up.URL, "http://")}}
			s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: &tc.rp}}, Clusters: []Cluster{cl}})
			resp, _ := do(t, s, map[string]string{"x-request-id": "rt"}, "")
			rec := waitRecord(t, s, "rt")
			if resp.StatusCode != tc.wantStatus || len(rec.Attempts) != tc.wantAttempts {
				t.Errorf("status %d attempts %d, want %d %d", resp.StatusCode, len(rec.Attempts), tc.wantStatus, tc.wantAttempts)
			}
			if tc.check != nil {
				tc.check(t, s.Stats())
			}
		})
	}
}

// The rate-limited back-off is jittered in [interval, 1.5×interval); the
// regular one in [0, base·2^n) capped at max_interval.
func TestBackoffIntervals(t *testing.T) {
	s, _ := New(Config{})
	rp := &RetryPolicy{RetryOn: []string{"retriable-status-codes"}, RetriableStatusCodes: []int{429}, NumRetries: 100,
		ResetHeaders: []ResetHeader{{Name: "retry-after", Format: "SECONDS"}}, BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond}
	cl := &Cluster{RetryBudget: &RetryBudget{BudgetPercent: 100, MinRetryConcurrency: new(int)}}
	*cl.RetryBudget.MinRetryConcurrency = 1000
	rs := newRetryState(s, rp, cl, &clusterResources{})
	for range 50 {
		st, d := rs.shouldRetry(retryWithBackoff, headers{{"retry-after", "2"}})
		if st != retryYes || d < 2*time.Second || d >= 3*time.Second {
			t.Fatalf("rate-limited back-off %v", d)
		}
	}
	for i := range 50 {
		_, d := rs.shouldRetry(retryWithBackoff, headers{})
		if limit := min(10*time.Millisecond<<min(i, 8), 40*time.Millisecond); d >= limit {
			t.Fatalf("retry %d: back-off %v not below %v", i, d, limit)
		}
	}
}
