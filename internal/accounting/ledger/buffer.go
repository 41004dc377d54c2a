package ledger

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// buffer holds entries Redis has not taken yet, oldest first, bounded by
// capacity. Overflow goes to the spill file (JSON lines) or is dropped.
type buffer struct {
	mu    sync.Mutex
	items []Entry
	cap   int

	spillPath string
	spillMu   sync.Mutex // serialises appends with the rename in replaySpill
	log       *slog.Logger
	m         *metrics
	lastDrop  atomic.Int64 // unix nanos of the last drop log line
}

func newBuffer(capacity int, spillPath string, log *slog.Logger, m *metrics) *buffer {
	return &buffer{cap: max(capacity, 0), spillPath: spillPath, log: log, m: m}
}

func (b *buffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.items)
}

// push appends e; when full, the oldest entry leaves for the spill file.
func (b *buffer) push(e Entry) {
	b.mu.Lock()
	var evicted []Entry
	if b.cap == 0 {
		evicted = []Entry{e}
	} else {
		if len(b.items) >= b.cap {
			evicted = []Entry{b.items[0]}
			b.items[0] = Entry{}
			b.items = b.items[1:]
		}
		b.items = append(b.items, e)
	}
	n := len(b.items)
	b.mu.Unlock()
	b.m.buffered.Set(float64(n))
	if evicted != nil {
		b.overflow(evicted)
	}
}

// pop removes up to n of the oldest entries.
func (b *buffer) pop(n int) []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.items))
	out := make([]Entry, n)
	copy(out, b.items)
	clear(b.items[:n])
	b.items = b.items[n:]
	if len(b.items) == 0 {
		b.items = nil // let the backing array go
	}
	b.m.buffered.Set(float64(len(b.items)))
	return out
}

// pushFront puts a failed batch back in front (it is older than anything
// queued meanwhile); what no longer fits overflows, oldest first.
func (b *buffer) pushFront(batch []Entry) {
	b.mu.Lock()
	items := make([]Entry, 0, len(batch)+len(b.items))
	items = append(append(items, batch...), b.items...)
	var evicted []Entry
	if over := len(items) - b.cap; over > 0 {
		evicted = items[:over:over]
		items = items[over:]
	}
	b.items = items
	n := len(b.items)
	b.mu.Unlock()
	b.m.buffered.Set(float64(n))
	if evicted != nil {
		b.overflow(evicted)
	}
}

// spillAll empties the buffer into the spill file (Close after its deadline).
func (b *buffer) spillAll() error {
	b.mu.Lock()
	items := b.items
	b.items = nil
	b.mu.Unlock()
	b.m.buffered.Set(0)
	if len(items) == 0 {
		return nil
	}
	if b.spillPath == "" {
		b.drop(items, errors.New("no spill file configured"))
		return fmt.Errorf("ledger: %d entries dropped at shutdown: no spill file", len(items))
	}
	return b.overflow(items)
}

// overflow spills entries, or drops them with a metric and an error log
// when there is no spill file or writing it fails.
func (b *buffer) overflow(entries []Entry) error {
	if b.spillPath == "" {
		b.drop(entries, errors.New("ledger buffer full and no spill file configured"))
		return nil
	}
	if err := b.appendSpill(entries); err != nil {
		b.drop(entries, err)
		return err
	}
	b.m.spilled.Add(float64(len(entries)))
	return nil
}

func (b *buffer) appendSpill(entries []Entry) error {
	b.spillMu.Lock()
	defer b.spillMu.Unlock()
	f, err := os.OpenFile(b.spillPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: opening spill file: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range entries {
		if err := enc.Encode(&entries[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("ledger: writing spill file: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("ledger: writing spill file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ledger: closing spill file: %w", err)
	}
	return nil
}

func (b *buffer) drop(entries []Entry, why error) {
	b.m.dropped.Add(float64(len(entries)))
	// One error line per second at most: a full buffer under load would
	// otherwise flood the log; the metric carries the exact count.
	now := time.Now().UnixNano()
	if last := b.lastDrop.Load(); now-last > int64(time.Second) && b.lastDrop.CompareAndSwap(last, now) {
		b.log.Error("ledger entries dropped (usage lost)", "count", len(entries),
			"tenant", entries[0].Tenant, "request_id", entries[0].RequestID, "err", why)
	}
}

func (b *buffer) replayingPath() string { return b.spillPath + ".replay" }

func (b *buffer) hasSpill() bool {
	if b.spillPath == "" {
		return false
	}
	// The spill file first: replaySpill renames it to the replaying path,
	// and looked at the other way round a rename between the two looks saw
	// neither (the spill replayed while it was still to write: a flaky
	// TestSpillSurvivesRestartOfProcess, and LedgerDrained true too soon).
	for _, p := range []string{b.spillPath, b.replayingPath()} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// replaySpill moves the spill file aside (appends then start a new one) and
// writes its entries in batches. On failure the moved file stays and is
// replayed from its start next time; the ledger's dedupe makes that safe.
func (b *buffer) replaySpill(write func([]Entry) error, batchSize int) error {
	if b.spillPath == "" {
		return nil
	}
	rp := b.replayingPath()
	b.spillMu.Lock()
	if _, err := os.Stat(rp); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(b.spillPath, rp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.spillMu.Unlock()
			return fmt.Errorf("ledger: moving spill file: %w", err)
		}
	}
	b.spillMu.Unlock()
	f, err := os.Open(rp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: opening spill file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	batch := make([]Entry, 0, batchSize)
	line := 0
	for sc.Scan() {
		line++
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Tenant == "" {
			b.m.dropped.Inc()
			b.log.Error("ledger: unreadable spill line skipped", "file", rp, "line", line, "err", err)
			continue
		}
		batch = append(batch, e)
		if len(batch) == batchSize {
			if err := write(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ledger: reading spill file: %w", err)
	}
	if len(batch) > 0 {
		if err := write(batch); err != nil {
			return err
		}
	}
	_ = f.Close()
	if err := os.Remove(rp); err != nil {
		return fmt.Errorf("ledger: removing replayed spill file: %w", err)
	}
	b.log.Info("ledger: spill file replayed", "entries", line)
	return nil
}
