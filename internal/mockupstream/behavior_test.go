package mockupstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestBehaviors(t *testing.T) {
	cases := []struct {
		name       string
		b          Behavior
		stream     bool
		wantStatus int // 0: transport error expected
		wantEvents int // SSE payloads read before the reset
		outcome    string
		check      func(t *testing.T, resp *http.Response, c Counters)
	}{
		{name: "ok", b: Behavior{}, wantStatus: 200, outcome: "ok"},
		{name: "429", b: Behavior{Action: ActRateLimit, RetryAfter: 1500 * time.Millisecond}, wantStatus: 429, outcome: "rate_limit",
			check: func(t *testing.T, resp *http.Response, c Counters) {
				if resp.Header.Get("Retry-After") != "2" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" || c.RateLimited != 1 {
					t.Fatalf("headers %v counters %+v", resp.Header, c)
				}
			}},
		{name: "503", b: Behavior{Action: ActError, Status: 503}, wantStatus: 503, outcome: "error",
			check: func(t *testing.T, _ *http.Response, c Counters) {
				if c.Errors != 1 {
					t.Fatalf("counters %+v", c)
				}
			}},
		{name: "500 default", b: Behavior{Action: ActError}, wantStatus: 500, outcome: "error"},
		{name: "reset", b: Behavior{Action: ActReset}, outcome: "reset",
			check: func(t *testing.T, _ *http.Response, c Counters) {
				if c.Resets != 1 {
					t.Fatalf("counters %+v", c)
				}
			}},
		{name: "reset mid stream", b: Behavior{Action: ActResetMidStream, ResetAfterChunks: 2}, stream: true, wantStatus: 200, wantEvents: 2, outcome: "reset_mid_stream"},
		{name: "reset mid JSON", b: Behavior{Action: ActResetMidStream}, wantStatus: 200, outcome: "reset_mid_stream"},
		{name: "extra headers", b: Behavior{Headers: map[string]string{"X-Ratelimit-Remaining-Tokens": "0"}}, wantStatus: 200, outcome: "ok",
			check: func(t *testing.T, resp *http.Response, _ Counters) {
				if resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
					t.Fatalf("headers %v", resp.Header)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, Options{Keys: testKeys(), CompletionTokens: 5})
			s.SetBehavior("a", tc.b)
			body, _ := json.Marshal(chatBody("hi", tc.stream, false))
			req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keyA)
			resp, err := newClient().Do(req)
			switch {
			case tc.wantStatus == 0:
				if err == nil {
					resp.Body.Close()
					t.Fatalf("want a transport error, got %d", resp.StatusCode)
				}
			case err != nil:
				t.Fatal(err)
			default:
				defer resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if tc.outcome == "reset_mid_stream" {
					events, rerr := readEvents(resp.Body)
					if tc.stream && len(events) != tc.wantEvents {
						t.Fatalf("read %d events before the reset, want %d", len(events), tc.wantEvents)
					}
					if rerr == nil && !tc.stream {
						_, rerr = io.ReadAll(resp.Body)
					}
					if rerr == nil {
						t.Fatal("body ended cleanly, want an error")
					}
				} else {
					_, _ = io.ReadAll(resp.Body)
				}
				if tc.wantStatus >= 400 {
					if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
						t.Fatalf("error content type %q", ct)
					}
				}
			}
			recs := s.Requests()
			if len(recs) != 1 || recs[0].Outcome != tc.outcome {
				t.Fatalf("records %+v", recs)
			}
			// Key b is unaffected.
			if r, _, err := post(t, s, "/v1/chat/completions", keyB, chatBody("hi", false, false), nil); err != nil || r.StatusCode != 200 {
				t.Fatalf("key b: %v %v", err, r)
			}
			if tc.check != nil {
				tc.check(t, resp, s.Count("a"))
			}
		})
	}
}

func TestRPMAndTPMLimits(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 10, Now: clock.Now})
	s.SetBehavior("a", Behavior{RPM: 2})
	s.SetBehavior("b", Behavior{TPM: 25}) // each request: 1 prompt + 10 completion
	for i, want := range []int{200, 200, 429} {
		resp, _, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want || resp.Header.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(max(0, 1-i)) ||
			resp.Header.Get("X-Ratelimit-Limit-Requests") != "2" {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		if want == 429 && (resp.Header.Get("Retry-After") != "60" || resp.Header.Get("X-Ratelimit-Reset-Requests") != "1m0s") {
			t.Fatalf("429 headers %v", resp.Header)
		}
	}
	clock.Add(45 * time.Second)
	resp, _, _ := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "15" {
		t.Fatalf("after 45s: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clock.Add(15 * time.Second)
	if resp, _, _ := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil); resp.StatusCode != 200 {
		t.Fatalf("new window: %d", resp.StatusCode)
	}
	if c := s.Count("a"); c.OK != 3 || c.RateLimited != 2 {
		t.Fatalf("counters a %+v", c)
	}

	for i, want := range []struct {
		status    int
		remaining string
	}{{200, "14"}, {200, "3"}, {429, "3"}} {
		resp, _, _ := post(t, s, "/v1/chat/completions", keyB, chatBody("hi", false, false), nil)
		if resp.StatusCode != want.status || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != want.remaining {
			t.Fatalf("tpm request %d: %d remaining %q", i, resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
		}
	}
	if r := s.Requests(); r[len(r)-1].Outcome != "tpm_limit" {
		t.Fatalf("outcome %q", r[len(r)-1].Outcome)
	}
}

// TestQuantizedWindow: 120 rpm in 1 s windows is 2 requests a second; the
// headers keep the per-minute limit and describe the current window.
func TestQuantizedWindow(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 10, Now: clock.Now})
	s.SetBehavior("a", Behavior{RPM: 120, Window: time.Second})
	for i, want := range []int{200, 200, 429} {
		resp, _, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want || resp.Header.Get("X-Ratelimit-Limit-Requests") != "120" ||
			resp.Header.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(max(0, 1-i)) {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	clock.Add(1500 * time.Millisecond) // the next window began 0.5 s ago
	resp, _, _ := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Reset-Requests") != "500ms" {
		t.Fatalf("next window: %d reset %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Reset-Requests"))
	}
}

func TestFailProbabilityIsSeeded(t *testing.T) {
	run := func(seed uint64) []int {
		s := start(t, Options{Keys: testKeys(), Seed: seed, Default: Behavior{FailProbability: 0.3, Status: 502}})
		var codes []int
		for range 60 {
			resp, _, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}
	a, b, c := run(7), run(7), run(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed, different outcomes")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("different seeds, same outcomes")
	}
	fails := 0
	for _, code := range a {
		switch code {
		case 502:
			fails++
		case 200:
		default:
			t.Fatalf("unexpected status %d", code)
		}
	}
	if fails < 6 || fails > 30 {
		t.Fatalf("%d of 60 failed with p=0.3", fails)
	}
}

// TestConcurrentBehaviorChanges runs requests while behaviours flip (run
// with -race).
func TestConcurrentBehaviorChanges(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 3})
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Go(func() {
		bs := []Behavior{{}, {Action: ActRateLimit}, {Action: ActError, Status: 503}, {RPM: 5}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetBehavior("a", bs[i%len(bs)])
			s.SetDefaultBehavior(bs[(i+1)%len(bs)])
			_ = s.Counts()
		}
	})
	client := &http.Client{}
	var reqs sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for g := range 4 {
		reqs.Go(func() {
			key := []string{keyA, keyB}[g%2]
			for range 25 {
				body, _ := json.Marshal(chatBody("hi", g%2 == 0, true))
				req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	reqs.Wait()
	close(stop)
	flips.Wait()
	if tot := s.Total(); tot.Requests != 100 || tot.OK+tot.RateLimited+tot.Errors != 100 {
		t.Fatalf("total %+v codes %v", tot, codes)
	}
}

func TestClientCancelIsRecorded(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), TTFT: 5 * time.Second})
	ctx, cancel := contextWithCancel(t)
	body, _ := json.Marshal(chatBody("hi", true, false))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, contextCanceled) {
		t.Logf("read error: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Count("a").Canceled != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("cancel not recorded: %+v", s.Requests())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
