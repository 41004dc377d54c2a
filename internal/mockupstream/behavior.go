package mockupstream

import (
	"math"
	"time"
)

// Action is what the mock does with a request that passed authentication.
type Action int

const (
	// ActOK answers normally.
	ActOK Action = iota
	// ActRateLimit answers 429 with Retry-After and
	// x-ratelimit-remaining-requests: 0.
	ActRateLimit
	// ActError answers Behavior.Status (default 500) with an OpenAI error.
	ActError
	// ActReset closes the connection without answering (after reading the
	// request): Envoy sees an upstream reset.
	ActReset
	// ActResetMidStream sends the headers and Behavior.ResetAfterChunks
	// chunks, then resets the connection. A JSON answer is cut in half.
	ActResetMidStream
)

func (a Action) String() string {
	switch a {
	case ActOK:
		return "ok"
	case ActRateLimit:
		return "rate_limit"
	case ActError:
		return "error"
	case ActReset:
		return "reset"
	case ActResetMidStream:
		return "reset_mid_stream"
	}
	return "unknown"
}

// Behavior is how the mock treats the requests of one key. Change it at any
// time with Server.SetBehavior; it applies from the next request.
type Behavior struct {
	Action Action
	// Status is the HTTP status of ActError (default 500).
	Status int
	// RetryAfter is sent as Retry-After (whole seconds, rounded up) with
	// ActRateLimit. Default 1s.
	RetryAfter time.Duration
	// ResetAfterChunks is how many SSE chunks ActResetMidStream sends first.
	ResetAfterChunks int

	// RPM and TPM, when positive, limit the key in fixed one-minute windows
	// (starting at the key's first request). Every answer of such a key
	// carries x-ratelimit-limit-*, x-ratelimit-remaining-* and
	// x-ratelimit-reset-* for the limits set; beyond a limit the answer is
	// 429 with Retry-After until the window ends.
	RPM int
	TPM int
	// Window, when positive and shorter than a minute, enforces RPM and
	// TPM in windows of that length with the quota scaled down to it, the
	// way providers quantize their limits ("60,000 requests/minute may be
	// enforced as 1,000 requests/second", OpenAI's rate-limit guide):
	// x-ratelimit-limit-* still say the per-minute figure, -remaining-*
	// and -reset-* describe the current window. Default one minute.
	Window time.Duration
	// Sliding, when set, limits the key in a sliding window stated the
	// OpenAI way instead of RPM/TPM (sliding.go).
	Sliding *SlidingWindow

	// FailProbability in [0,1] makes a request otherwise answered OK take
	// FailAction instead (seeded RNG, Options.Seed). FailAction defaults to
	// ActError when zero (ActOK).
	FailProbability float64
	FailAction      Action

	// Latency is added before anything is sent (slow key).
	Latency time.Duration
	// Headers are added to every answer for this key.
	Headers map[string]string
}

func (b Behavior) status() int {
	if b.Status == 0 {
		return 500
	}
	return b.Status
}

func (b Behavior) failAction() Action {
	if b.FailAction == ActOK {
		return ActError
	}
	return b.FailAction
}

func retryAfterSeconds(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	return int(math.Ceil(d.Seconds()))
}

// window returns the enforcement window and the request and token quotas
// within it (0: not limited).
func (b Behavior) window() (d time.Duration, rpm, tpm int) {
	d = b.Window
	if d <= 0 || d > time.Minute {
		return time.Minute, b.RPM, b.TPM
	}
	scale := func(n int) int {
		if n <= 0 {
			return 0
		}
		return max(1, int(float64(n)*d.Seconds()/60))
	}
	return d, scale(b.RPM), scale(b.TPM)
}

// window is one key's fixed usage window.
type window struct {
	start    time.Time
	length   time.Duration
	requests int
	tokens   int
}

func (w *window) roll(now time.Time, length time.Duration) {
	if w.start.IsZero() || now.Sub(w.start) >= w.length || w.length != length {
		// Windows are aligned to the first one, as a provider's clock
		// would be: an idle key starts again on the next boundary.
		start := now
		if !w.start.IsZero() && w.length == length {
			start = w.start.Add(now.Sub(w.start) / length * length)
		}
		*w = window{start: start, length: length}
	}
}

func (w *window) resetIn(now time.Time) time.Duration {
	d := w.start.Add(w.length).Sub(now)
	if d < 0 {
		return 0
	}
	return d
}
