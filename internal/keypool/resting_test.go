package keypool

import (
	"errors"
	"testing"
	"time"
)

// restAnswer is an answer with status that leaves its key's window empty
// until reset.
func restAnswer(status int, reset string) Outcome {
	return ParseOutcome(status, func(n string) string {
		return map[string]string{"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}[n]
	})
}

// TestPickWaitsForRestingKey: with the pace on (the request was admitted
// for these keys), a pick that finds every key resting until its
// provider's window resets, within the pick's wait bound, waits for the
// soonest instead of refusing the admitted request; one whose keys rest
// longer than the bound, a retry whose soonest key is one it already
// tried, or a pick without the pace is refused at once as before.
func TestPickWaitsForRestingKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		yaml     string
		resets   [2]string // keys a and b
		tried    bool      // the retry of a request whose first attempt a refused
		wantWait bool
	}{
		{"paced, window resets within the bound", paceYAML, [2]string{"300ms", "300ms"}, false, true},
		{"paced, window resets beyond the bound", paceYAML, [2]string{"5s", "5s"}, false, false},
		{"paced retry, only the tried key back within the bound", paceYAML, [2]string{"300ms", "5s"}, true, false},
		{"unpaced", "admission: {max_wait: 0s, pace: false}\n", [2]string{"300ms", "300ms"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, true)+tc.yaml,
				map[string][]key{"b": {{id: "a"}, {id: "b"}}})
			p := newPools(t, cfg, Options{})
			req := PickRequest{Attempt: 1}
			if tc.tried {
				l := pick(t, p, "b", PickRequest{RequestID: "r1", Attempt: 1, Key: "a"})
				l.Done(restAnswer(429, tc.resets[0]))
				req = PickRequest{RequestID: "r1", Attempt: 2}
			} else if err := p.Report(t.Context(), "b", "a", "", restAnswer(200, tc.resets[0])); err != nil {
				t.Fatal(err)
			}
			if err := p.Report(t.Context(), "b", "b", "", restAnswer(200, tc.resets[1])); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l, err := p.Pick(t.Context(), "b", req)
			took := time.Since(start)
			var ex *ExhaustedError
			switch {
			case tc.wantWait && err != nil:
				t.Fatalf("pick after %s: %v, want it to wait for a key's window", took, err)
			case tc.wantWait && took < 250*time.Millisecond:
				t.Fatalf("picked %s after %s: before any key's window reset", l.KeyID, took)
			case !tc.wantWait && !errors.As(err, &ex):
				t.Fatalf("pick after %s: %v (key %q), want refused at once", took, err, l.KeyID)
			case !tc.wantWait && took > 100*time.Millisecond:
				t.Fatalf("refused after %s, want at once", took)
			}
			if err == nil {
				l.Done(status(200))
			}
		})
	}
}
