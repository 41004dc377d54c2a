package ledger

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// With Redis down, a full buffer spills its oldest entries to the spill
// file, Close spills the rest; a new process on the same file replays them
// all (an unreadable line is skipped and counted), then removes the file.
func TestSpillSurvivesRestartOfProcess(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	spill := filepath.Join(t.TempDir(), "spill.jsonl")
	entries := mixedEntries(100, 3)
	down := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	a := New(down, Options{KeyPrefix: "sg:", Logger: quietLog(), Buffer: 10, SpillFile: spill, WriteTimeout: 100 * time.Millisecond})
	for _, e := range entries {
		if err := a.Record(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	if n, spilled := a.Pending(); n != 10 || !spilled || counterValue(a.m.spilled) != 90 {
		t.Fatalf("pending %d, spilled %v (%g), want 10 in memory and 90 spilled", n, spilled, counterValue(a.m.spilled))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if err := a.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	cancel()
	if n, _ := a.Pending(); n != 0 || counterValue(a.m.spilled) != 100 {
		t.Fatalf("after close %d pending, %g spilled; want 0 and 100", n, counterValue(a.m.spilled))
	}
	f, err := os.OpenFile(spill, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("{not json\n")
	_ = f.Close()

	srv.Restart()
	b := New(srv.Client(), Options{KeyPrefix: "sg:", Logger: quietLog(), SpillFile: spill, RetryInterval: 10 * time.Millisecond})
	runCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	go b.Run(runCtx)
	for {
		// Replayed means written: the spill file is read into the buffer
		// first, so an empty file alone may still be entries on their way.
		if n, spilled := b.Pending(); n == 0 && !spilled {
			break
		}
		select {
		case <-runCtx.Done():
			t.Fatal("spill file never replayed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got := counterValue(b.m.replayed); got != 100 {
		t.Fatalf("replayed %g, want 100", got)
	}
	if got := counterValue(b.m.dropped); got != 1 {
		t.Fatalf("dropped %g, want the 1 unreadable line", got)
	}
	checkLedger(t, b, expected(entries))
	checkScopes(t, b, entries)
}

// Without a spill file a full buffer drops its oldest entries, counted.
func TestFullBufferWithoutSpillDropsOldest(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	down := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	l := New(down, Options{KeyPrefix: "sg:", Logger: quietLog(), Buffer: 10, WriteTimeout: 100 * time.Millisecond})
	entries := mixedEntries(25, 4)
	for _, e := range entries {
		_ = l.Record(t.Context(), e)
	}
	if got := counterValue(l.m.dropped); got != 15 {
		t.Fatalf("dropped %g, want 15", got)
	}
	kept := l.buf.pop(100)
	if len(kept) != 10 || kept[0].RequestID != entries[15].RequestID {
		t.Fatalf("kept %d entries starting at %s, want the newest 10", len(kept), kept[0].RequestID)
	}
}

// A write whose caller has gone (client disconnect) still lands.
func TestRecordIgnoresCallerCancellation(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := mixedEntries(1, 5)[0]
	e.Partial = true
	if err := l.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Query(t.Context(), e.Tenant, "2026-12")
	if err != nil || rep.Total.Requests != 1 || rep.Total.Partial != 1 {
		t.Fatalf("report %+v, %v", rep.Total, err)
	}
	if n, _ := l.Pending(); n != 0 {
		t.Fatalf("%d entries buffered", n)
	}
}

// After Close there is no replay loop: a write Redis refuses goes straight
// to the spill file.
func TestRecordAfterCloseSpills(t *testing.T) {
	srv := redistest.Start(t)
	spill := filepath.Join(t.TempDir(), "spill.jsonl")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l := New(c, Options{KeyPrefix: "sg:", Logger: quietLog(), SpillFile: spill, WriteTimeout: 100 * time.Millisecond})
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	entries := mixedEntries(2, 6)
	if err := l.Record(t.Context(), entries[0]); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := l.Record(t.Context(), entries[1]); err != nil {
		t.Fatal(err)
	}
	if n, spilled := l.Pending(); n != 0 || !spilled || counterValue(l.m.writes) != 1 || counterValue(l.m.spilled) != 1 {
		t.Fatalf("pending %d, spilled %v, writes %g, spilled %g", n, spilled, counterValue(l.m.writes), counterValue(l.m.spilled))
	}
}
