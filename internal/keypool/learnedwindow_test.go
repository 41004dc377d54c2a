package keypool

import (
	"testing"
	"time"
)

// TestLearnedWindow: what the answers' limit, remaining and reset make of a
// key's per-minute rate (the pace's rpm).
func TestLearnedWindow(t *testing.T) {
	ok := func(limit, remaining int, reset time.Duration) Outcome {
		return Outcome{Status: 200, LimitRequests: limit, RemainingRequests: remaining, RemainingTokens: -1, ResetRequests: reset}
	}
	for _, tc := range []struct {
		name     string
		answers  []Outcome
		cfgRPM   int
		wantRPM  int
		wantWin  time.Duration // shared with other replicas (0: per minute)
		wantSent bool          // the last answer changed the shared form
	}{
		{name: "no reset: per minute", answers: []Outcome{ok(60, 59, 0)}, wantRPM: 60, wantSent: true},
		{name: "10 s sliding window, idle then busy", answers: []Outcome{ok(60, 59, 10*time.Second), ok(60, 20, 10*time.Second)},
			wantRPM: 360, wantWin: 10 * time.Second, wantSent: true},
		{name: "10 s window, only idle answers: not yet learned, no rate (held to what remains)", answers: []Outcome{ok(60, 59, 10*time.Second), ok(60, 50, 10*time.Second)},
			wantRPM: 0},
		{name: "per-minute limit in one-second slices (never more than a slice left)",
			answers: []Outcome{ok(600, 9, time.Second), ok(600, 0, 400*time.Millisecond), ok(600, 5, 900*time.Millisecond)}, wantRPM: 600},
		{name: "refilling bucket: the window grows to the minute as the key is used",
			answers: []Outcome{ok(100, 99, 600*time.Millisecond), ok(100, 50, 30*time.Second), ok(100, 10, 54*time.Second)},
			wantRPM: 111, wantWin: 54 * time.Second, wantSent: true},
		{name: "a 429's shorter reset does not shrink it",
			answers: []Outcome{ok(60, 59, 10*time.Second), ok(60, 0, 10*time.Second), {Status: 429, LimitRequests: 60, RemainingRequests: 0, RemainingTokens: -1, ResetRequests: 3 * time.Second}},
			wantRPM: 360, wantWin: 10 * time.Second},
		{name: "reset beyond a minute: per minute", answers: []Outcome{ok(60, 59, 0), ok(60, 0, 5*time.Minute)}, wantRPM: 60, wantWin: time.Minute, wantSent: true},
		{name: "configured rpm stays the ceiling", answers: []Outcome{ok(60, 59, 10*time.Second), ok(60, 0, 10*time.Second)}, cfgRPM: 100,
			wantRPM: 100, wantWin: 10 * time.Second, wantSent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &keyState{}
			k.cfg.RPM = tc.cfgRPM
			var sent bool
			for _, o := range tc.answers {
				sent = k.learn(o)
			}
			if got := k.rpm(); got != tc.wantRPM {
				t.Errorf("rpm %d, want %d", got, tc.wantRPM)
			}
			if got := k.sharedWindow(); got != tc.wantWin {
				t.Errorf("shared window %s, want %s", got, tc.wantWin)
			}
			if sent != tc.wantSent {
				t.Errorf("last answer changed the shared form: %v, want %v", sent, tc.wantSent)
			}
		})
	}
}

// TestLimitsEncoding: the window travels with the limits; the older
// two-field form still reads as per minute.
func TestLimitsEncoding(t *testing.T) {
	for _, tc := range []struct {
		v            string
		rpm, tpm     int
		window       time.Duration
		ok           bool
		encodeWindow bool
	}{
		{v: "60 1000", rpm: 60, tpm: 1000, ok: true},
		{v: "60 0 10000", rpm: 60, window: 10 * time.Second, ok: true, encodeWindow: true},
		{v: "60", ok: false},
		{v: "60 0 x", ok: false},
		{v: "60 0 -5", ok: false},
		{v: "1 2 3 4", ok: false},
	} {
		_, _, rpm, tpm, w, ok := decodeLimits("b|k", tc.v)
		if ok != tc.ok || ok && (rpm != tc.rpm || tpm != tc.tpm || w != tc.window) {
			t.Errorf("%q: %d %d %s %v", tc.v, rpm, tpm, w, ok)
		}
		if ok {
			if got := encodeLimits(rpm, tpm, w); got != tc.v {
				t.Errorf("encode %q, want %q", got, tc.v)
			}
		}
	}
	k := &keyState{learnedRPM: 60}
	k.adoptWindow(10 * time.Second)
	if k.rpm() != 360 {
		t.Errorf("adopted 10 s window: rpm %d, want 360", k.rpm())
	}
}

// TestNextSlot: a served answer that left no request holds a key with a
// learned window for one request's share of it, not the whole reset; in
// the first window since the key's first attempt, until that window ends.
func TestNextSlot(t *testing.T) {
	ok := func(limit, remaining int, reset time.Duration) Outcome {
		return Outcome{Status: 200, LimitRequests: limit, RemainingRequests: remaining, RemainingTokens: -1, ResetRequests: reset}
	}
	for _, tc := range []struct {
		name    string
		first   time.Duration // the key's first attempt, this long ago (0: none)
		known   bool          // the window was known at that first attempt
		answers []Outcome
		want    time.Duration
	}{
		{name: "10 s window learned: one request's share", answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 0, 10*time.Second)}, want: 10 * time.Second / 60},
		{name: "window not learned: the reset", answers: []Outcome{ok(60, 0, 10*time.Second)}, want: 10 * time.Second},
		{name: "per minute in one-second slices: the reset", answers: []Outcome{ok(600, 9, time.Second), ok(600, 0, 400*time.Millisecond)}, want: 400 * time.Millisecond},
		{name: "requests left: the reset", answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 3, 10*time.Second)}, want: 10 * time.Second},
		// The window filled within a window of the key's first attempt
		// (2 s ago): the burst leaves 10 s after it, 8 s from now.
		{name: "first window: until the first attempt's window ends", first: 2 * time.Second,
			answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 0, 9500*time.Millisecond)}, want: 8 * time.Second},
		{name: "first window, within the reset", first: 2 * time.Second,
			answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 0, 5*time.Second)}, want: 5 * time.Second},
		{name: "after the first window: one request's share", first: 15 * time.Second,
			answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 0, 10*time.Second)}, want: 10 * time.Second / 60},
		// A replica that restarted under steady traffic knew the window
		// (adopted) before its first attempt: no burst of its own.
		{name: "first window, the window known at the first attempt: one request's share", first: 2 * time.Second, known: true,
			answers: []Outcome{ok(60, 20, 10*time.Second), ok(60, 0, 9500*time.Millisecond)}, want: 10 * time.Second / 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			k := &keyState{}
			if tc.first > 0 {
				k.firstSent, k.firstBlind = now.Add(-tc.first), !tc.known
			}
			var last Outcome
			for _, o := range tc.answers {
				k.learn(o)
				last = o
			}
			if got := k.nextSlot(last, now); got != tc.want {
				t.Errorf("held %s, want %s", got, tc.want)
			}
		})
	}
}
