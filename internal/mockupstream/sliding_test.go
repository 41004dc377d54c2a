package mockupstream

import (
	"strconv"
	"testing"
	"time"
)

// TestSlidingWindow: a key limited to 3 requests in any 10 s, stated the
// OpenAI way; each step advances the clock, then sends one request.
func TestSlidingWindow(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, Options{Keys: testKeys(), Now: clock.Now})
	s.SetBehavior("a", Behavior{Sliding: &SlidingWindow{Limit: 3, Window: 10 * time.Second}})
	steps := []struct {
		advance                      time.Duration
		status                       int
		remaining, reset, retryAfter string
	}{
		{0, 200, "2", "10s", ""},
		{4 * time.Second, 200, "1", "10s", ""},
		{2 * time.Second, 200, "0", "10s", ""},
		{1 * time.Second, 429, "0", "9s", "3"}, // t=7: the first leaves at t=10, the third at 16
		{3 * time.Second, 200, "0", "10s", ""}, // t=10: the first left, this one counts
		{0, 429, "0", "10s", "4"},              // the second leaves at t=14
		{10 * time.Second, 200, "2", "10s", ""},
	}
	for i, st := range steps {
		clock.Add(st.advance)
		resp, _, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		if resp.StatusCode != st.status || h.Get("X-Ratelimit-Limit-Requests") != "3" || h.Get("X-Ratelimit-Remaining-Requests") != st.remaining ||
			h.Get("X-Ratelimit-Reset-Requests") != st.reset || h.Get("Retry-After") != st.retryAfter {
			t.Errorf("step %d: status %d, limit %q remaining %q reset %q retry-after %q; want %d, 3, %q, %q, %q", i, resp.StatusCode,
				h.Get("X-Ratelimit-Limit-Requests"), h.Get("X-Ratelimit-Remaining-Requests"), h.Get("X-Ratelimit-Reset-Requests"),
				h.Get("Retry-After"), st.status, st.remaining, st.reset, st.retryAfter)
		}
	}
	if c := s.Count("a"); c.OK != 5 || c.RateLimited != 2 {
		t.Errorf("counters %+v, want 5 ok and 2 rate limited", c)
	}
}

// TestSlidingWindowRefuses: a key refusing half its requests answers them
// 429 with Retry-After: 1 while its window has room, and does not count
// them in the window.
func TestSlidingWindowRefuses(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, Options{Keys: testKeys(), Now: clock.Now, Seed: 3})
	s.SetBehavior("a", Behavior{Sliding: &SlidingWindow{Limit: 1000, Window: 10 * time.Second, RefuseShare: 0.5}})
	const n = 400
	for range n {
		resp, _, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 429 && (resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Ratelimit-Remaining-Requests") == "0") {
			t.Fatalf("refusal headers %v", resp.Header)
		}
	}
	c := s.Count("a")
	if c.OK+c.RateLimited != n || c.RateLimited < n*4/10 || c.RateLimited > n*6/10 {
		t.Fatalf("counters %+v: want about half of %d refused", c, n)
	}
	resp, _, _ := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
	used := c.OK
	if resp.StatusCode == 200 {
		used++
	}
	if got := resp.Header.Get("X-Ratelimit-Remaining-Requests"); got != strconv.Itoa(1000-used) {
		t.Fatalf("remaining %s after %d served: refusals were counted", got, used)
	}
}
