package keypool

import (
	"errors"
	"testing"
	"time"
)

// TestPickWaitsForRestingKey: with the pace on (the request was admitted
// for these keys), a pick that finds every key resting until its
// provider's window resets, within the pick's wait bound, waits for the
// soonest instead of refusing the admitted request; one whose keys rest
// longer than the bound, or that are failing, is refused at once as
// before; without the pace nothing waits.
func TestPickWaitsForRestingKey(t *testing.T) {
	rest := func(reset string) Outcome {
		return ParseOutcome(200, func(n string) string {
			return map[string]string{"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}[n]
		})
	}
	for _, tc := range []struct {
		name     string
		yaml     string
		reset    string
		wantWait bool
	}{
		{"paced, window resets within the bound", paceYAML, "300ms", true},
		{"paced, window resets beyond the bound", paceYAML, "5s", false},
		{"unpaced", "admission: {max_wait: 0s, pace: false}\n", "300ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, true)+tc.yaml,
				map[string][]key{"b": {{id: "a"}, {id: "b"}}})
			p := newPools(t, cfg, Options{})
			for _, k := range []string{"a", "b"} {
				if err := p.Report(t.Context(), "b", k, "", rest(tc.reset)); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			l, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1})
			took := time.Since(start)
			var ex *ExhaustedError
			switch {
			case tc.wantWait && err != nil:
				t.Fatalf("pick after %s: %v, want it to wait for a key's window", took, err)
			case tc.wantWait && took < 250*time.Millisecond:
				t.Fatalf("picked %s after %s: before any key's window reset", l.KeyID, took)
			case !tc.wantWait && !errors.As(err, &ex):
				t.Fatalf("pick after %s: %v, want refused at once", took, err)
			case !tc.wantWait && took > 100*time.Millisecond:
				t.Fatalf("refused after %s, want at once", took)
			}
			if err == nil {
				l.Done(status(200))
			}
		})
	}
}
