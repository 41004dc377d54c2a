package keypool

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Outcome is what one upstream attempt told us about the key it used.
// Build it with ParseOutcome (ParseOutcome(status, nil) for a bare status):
// in a literal, RemainingRequests/RemainingTokens of 0 mean "exhausted" and
// open the key when breaker.honour_remaining is on; -1 means unknown.
type Outcome struct {
	// Status is the upstream HTTP status; 0 with Reset false means "no
	// response seen" (only the in-flight slot is released).
	Status int
	// RetryAfter is the provider's Retry-After (0: none).
	RetryAfter time.Duration
	// RemainingRequests and RemainingTokens come from
	// x-ratelimit-remaining-requests/-tokens; -1 means unknown.
	RemainingRequests, RemainingTokens int
	// ResetRequests and ResetTokens come from x-ratelimit-reset-requests/
	// -tokens ("1s", "6m0s"); 0 means unknown.
	ResetRequests, ResetTokens time.Duration
	// LimitRequests and LimitTokens are the key's per-minute limits as the
	// provider states them (x-ratelimit-limit-requests/-tokens, or
	// Anthropic's anthropic-ratelimit-{requests,tokens}-limit); 0 or less
	// means unknown. They feed the admission pace (pace.go).
	LimitRequests, LimitTokens int
	// Reset is a connection reset or connect failure (no status).
	Reset bool
}

// outcomeClass is how the breaker counts an outcome.
type outcomeClass int

const (
	classNone        outcomeClass = iota // nothing observed
	classSuccess                         // the key works
	classRateLimited                     // 429
	classFailure                         // 5xx, reset
	classAuth                            // 401, 403: the provider refused the key
)

func (o Outcome) class() outcomeClass {
	switch {
	case o.Reset:
		return classFailure
	case o.Status == 0:
		return classNone
	case o.Status == http.StatusTooManyRequests:
		return classRateLimited
	case o.Status == http.StatusUnauthorized, o.Status == http.StatusForbidden:
		// The key itself is bad (revoked, mistyped, no access to the
		// model): it is not coming back in a minute.
		return classAuth
	case o.Status >= 500:
		return classFailure
	default:
		// 2xx, 3xx and client errors other than 401/429: the key answered.
		return classSuccess
	}
}

// hold is how long the provider says the key stays limited: its
// Retry-After (or retry-after-ms), else, on a 429 without one, the latest
// reset among the limits it reports exhausted (x-ratelimit-reset-* or
// anthropic-ratelimit-*-reset with remaining 0). Zero: not stated.
func (o Outcome) hold() time.Duration {
	if o.RetryAfter > 0 || o.Status != http.StatusTooManyRequests {
		return o.RetryAfter
	}
	var d time.Duration
	if o.RemainingRequests == 0 {
		d = max(d, o.ResetRequests)
	}
	if o.RemainingTokens == 0 {
		d = max(d, o.ResetTokens)
	}
	return d
}

// Failed reports whether the attempt failed in a way that must keep the
// same request from retrying on this key.
func (o Outcome) Failed() bool {
	c := o.class()
	return c == classRateLimited || c == classFailure || c == classAuth
}

// ParseOutcome reads the status and the provider's rate-limit headers of an
// upstream response. headers returns a header value by lower-case name ("" if
// absent). It understands Retry-After (seconds or HTTP date), retry-after-ms
// (OpenAI), x-ratelimit-remaining-requests/-tokens and
// x-ratelimit-reset-requests/-tokens in OpenAI's duration format ("1s",
// "6m0s", "20ms") or plain seconds, and Anthropic's
// anthropic-ratelimit-{requests,tokens}-{remaining,reset} when the OpenAI
// names are absent.
func ParseOutcome(status int, headers func(name string) string) Outcome {
	o := Outcome{Status: status, RemainingRequests: -1, RemainingTokens: -1}
	if headers == nil {
		return o
	}
	if v := headers("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 {
			o.RetryAfter = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = parseRetryAfter(headers("retry-after"), time.Now())
	}
	o.RemainingRequests = parseCount(headers("x-ratelimit-remaining-requests"))
	o.RemainingTokens = parseCount(headers("x-ratelimit-remaining-tokens"))
	o.ResetRequests = parseReset(headers("x-ratelimit-reset-requests"))
	o.ResetTokens = parseReset(headers("x-ratelimit-reset-tokens"))
	o.LimitRequests = max(parseCount(headers("x-ratelimit-limit-requests")), 0)
	o.LimitTokens = max(parseCount(headers("x-ratelimit-limit-tokens")), 0)
	if o.LimitRequests == 0 && o.LimitTokens == 0 {
		o.LimitRequests = max(parseCount(headers("anthropic-ratelimit-requests-limit")), 0)
		o.LimitTokens = max(parseCount(headers("anthropic-ratelimit-tokens-limit")), 0)
	}
	if o.RemainingRequests < 0 && o.RemainingTokens < 0 {
		// Anthropic's names; its resets are RFC 3339 instants.
		rr := parseCount(headers("anthropic-ratelimit-requests-remaining"))
		rt := parseCount(headers("anthropic-ratelimit-tokens-remaining"))
		if rr >= 0 || rt >= 0 {
			now := time.Now()
			o.RemainingRequests, o.RemainingTokens = rr, rt
			o.ResetRequests = parseInstant(headers("anthropic-ratelimit-requests-reset"), now)
			o.ResetTokens = parseInstant(headers("anthropic-ratelimit-tokens-reset"), now)
		}
	}
	return o
}

func parseInstant(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
}

// parseRetryAfter accepts delay-seconds or an HTTP date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isNumber(v) {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func parseCount(v string) int {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if !isNumber(v) || strings.Contains(v, ".") {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// parseReset reads OpenAI's reset durations: Go-style "1s", "6m0s",
// "1h2m3.5s", "20ms", or a plain number of seconds.
func parseReset(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isNumber(v) {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// isNumber reports whether v is digits with at most one dot, so the common
// "6m0s" never builds a strconv error.
func isNumber(v string) bool {
	dots := 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots <= 1 && v != "."
}
