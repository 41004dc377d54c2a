package admin

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRefusalLogRing(t *testing.T) {
	l := NewRefusalLog(3)
	if got := l.Recent(10); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	for i := range 5 {
		l.Add(Refusal{Status: 400 + i, Reason: "r"})
	}
	got := l.Recent(0)
	if len(got) != 3 {
		t.Fatalf("kept %d, want 3", len(got))
	}
	for i, want := range []int{404, 403, 402} {
		if got[i].Status != want {
			t.Errorf("Recent[%d] = %d, want %d (newest first)", i, got[i].Status, want)
		}
		if got[i].Time.IsZero() {
			t.Errorf("Recent[%d] not stamped", i)
		}
	}
	if two := l.Recent(2); len(two) != 2 || two[0].Status != 404 {
		t.Errorf("Recent(2) = %v", two)
	}
	if l.Total() != 5 {
		t.Errorf("Total = %d, want 5", l.Total())
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l.Add(Refusal{Time: at})
	if l.Recent(1)[0].Time != at {
		t.Error("given time replaced")
	}
}

func TestRefusalLogClipsFields(t *testing.T) {
	l := NewRefusalLog(0)
	long := strings.Repeat("é", 500) // 2 bytes each: a cut may fall mid-rune
	l.Add(Refusal{Model: long, Tenant: long, Reason: long})
	r := l.Recent(1)[0]
	for _, s := range []string{r.Model, r.Tenant, r.Reason} {
		if len(s) > maxRefusalField+len("…") || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
			t.Errorf("clipped to %d bytes, valid %v", len(s), utf8.ValidString(s))
		}
	}
	var nilLog *RefusalLog
	nilLog.Add(Refusal{})
	if nilLog.Recent(1) != nil || nilLog.Total() != 0 {
		t.Error("nil log not empty")
	}
}

func TestRefusalLogConcurrent(t *testing.T) {
	l := NewRefusalLog(64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				l.Add(Refusal{Status: 429})
				_ = l.Recent(10)
			}
		})
	}
	wg.Wait()
	if l.Total() != 4000 || len(l.Recent(0)) != 64 {
		t.Errorf("total %d kept %d", l.Total(), len(l.Recent(0)))
	}
}

func BenchmarkRefusalLogAdd(b *testing.B) {
	l := NewRefusalLog(DefaultRefusals)
	r := Refusal{Time: time.Now(), Tenant: "team-red", Model: "gpt-4o-mini", Status: 429, Reason: "tenant tpm limit"}
	b.ReportAllocs()
	for b.Loop() {
		l.Add(r)
	}
}
