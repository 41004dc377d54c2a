package admission

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestWarnEvery: a failure repeated per request is logged once per
// interval, the next line saying how many were left out.
func TestWarnEvery(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var w warnEvery
	for range 100 {
		w.warn(log, "sessions unavailable", errors.New("timeout"))
	}
	if n := strings.Count(buf.String(), "sessions unavailable"); n != 1 {
		t.Fatalf("%d lines for 100 failures within the interval, want 1:\n%s", n, buf.String())
	}
	w.next.Store(0) // the interval has passed
	w.warn(log, "sessions unavailable", errors.New("timeout"))
	if !strings.Contains(buf.String(), "suppressed_since_last=99") {
		t.Fatalf("the second line does not count the 99 left out:\n%s", buf.String())
	}
}
