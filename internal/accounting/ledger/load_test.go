package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// mixedEntries builds n entries over 3 tenants, 3 models, 2 backends and 4
// keys, streaming and not, with provider usage priced exactly.
func mixedEntries(n int, seed uint64) []Entry {
	rng := rand.New(rand.NewPCG(seed, 1))
	rates := []pricing.Rate{
		pricing.RateOf(config.Price{InputPerMTok: 2.5, CachedInputPerMTok: 1.25, OutputPerMTok: 10}),
		pricing.RateOf(config.Price{InputPerMTok: 0.15, OutputPerMTok: 0.6}),
		pricing.RateOf(config.Price{InputPerMTok: 15, OutputPerMTok: 60, ReasoningPerMTok: 60}),
	}
	out := make([]Entry, n)
	for i := range out {
		m := rng.IntN(3)
		u := pricing.Usage{PromptTokens: rng.Int64N(20000), CompletionTokens: rng.Int64N(4000)}
		u.CachedTokens = rng.Int64N(u.PromptTokens + 1)
		if m == 2 {
			u.ReasoningTokens = rng.Int64N(u.CompletionTokens + 1)
		}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		var labels map[string]string
		switch rng.IntN(4) { // 0 to 3 labels; runs span tenants
		case 3:
			labels = map[string]string{"run": fmt.Sprint("r", rng.IntN(3)), "team": "search", "odd=name": "v|x"}
		case 2:
			labels = map[string]string{"run": fmt.Sprint("r", rng.IntN(3)), "team": "ads"}
		case 1:
			labels = map[string]string{"run": fmt.Sprint("r", rng.IntN(3))}
		}
		out[i] = Entry{
			RequestID: fmt.Sprintf("req-%d-%d", seed, i),
			Tenant:    []string{"acme", "beta", "gamma"}[rng.IntN(3)],
			Labels:    labels,
			Model:     []string{"gpt-4o", "gpt-4o-mini", "o1"}[m],
			Backend:   []string{"openai", "relay"}[rng.IntN(2)],
			KeyID:     fmt.Sprintf("k%d", rng.IntN(4)),
			Usage:     u, Cost: rates[m].Cost(u),
			Time:     testTime.Add(time.Duration(rng.IntN(20*24)) * time.Hour),
			Streamed: rng.IntN(2) == 0,
		}
		out[i].VirtualKeyID = fmt.Sprintf("sk_%s_%d", out[i].Tenant, rng.IntN(5))
	}
	return out
}

// expected sums entries the way the ledger should: per tenant, total and
// per model|backend|key.
func expected(entries []Entry) map[string]map[string]Counters {
	out := map[string]map[string]Counters{}
	for _, e := range entries {
		if out[e.Tenant] == nil {
			out[e.Tenant] = map[string]Counters{}
		}
		for _, k := range []string{"*", dims(&e)} {
			c := out[e.Tenant][k]
			c.Requests++
			c.InputTokens += e.Usage.PromptTokens
			c.OutputTokens += e.Usage.CompletionTokens
			c.TotalTokens += e.Usage.TotalTokens
			c.CachedTokens += e.Usage.CachedTokens
			c.ReasoningTokens += e.Usage.ReasoningTokens
			c.Cost += e.Cost
			c.Streamed += b2i(e.Streamed)
			c.Partial += b2i(e.Partial)
			out[e.Tenant][k] = c
		}
	}
	return out
}

func checkLedger(t *testing.T, l *Ledger, want map[string]map[string]Counters) {
	t.Helper()
	for tenant, rows := range want {
		rep, err := l.Query(t.Context(), tenant, "2026-12")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Total != rows["*"] {
			t.Fatalf("%s total = %+v, want %+v", tenant, rep.Total, rows["*"])
		}
		if len(rep.Rows) != len(rows)-1 {
			t.Fatalf("%s has %d rows, want %d", tenant, len(rep.Rows), len(rows)-1)
		}
		for _, r := range rep.Rows {
			if w := rows[r.Model+"|"+r.Backend+"|"+r.Key]; r.Counters != w {
				t.Fatalf("%s row %s|%s|%s = %+v, want %+v", tenant, r.Model, r.Backend, r.Key, r.Counters, w)
			}
		}
		var days Counters
		for _, d := range rep.Days {
			days.Requests += d.Requests
			days.Cost += d.Cost
		}
		if days.Requests != rows["*"].Requests || days.Cost != rows["*"].Cost {
			t.Fatalf("%s days sum to %d requests / %s, want %d / %s", tenant, days.Requests, days.Cost, rows["*"].Requests, rows["*"].Cost)
		}
	}
}

// 10,000 mixed entries written by 12 goroutines over 3 Ledger instances
// (replicas), 20% of them reported again by another replica (retries and
// duplicate reports): the ledger equals the sum of upstream usage exactly.
func TestLedgerMatchesUpstreamExactly(t *testing.T) {
	srv := redistest.Start(t)
	entries := mixedEntries(10000, 1)
	var ls []*Ledger
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		ls = append(ls, New(c, Options{KeyPrefix: "sg:", Logger: quietLog()}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	const writers = 12
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(entries); i += writers {
				e := entries[i]
				if err := ls[i%3].Record(ctx, e); err != nil {
					t.Errorf("record: %v", err)
				}
				if i%5 == 0 {
					// the same request reported again, possibly with
					// different numbers (a retry's partial view)
					dup := e
					dup.Usage.PromptTokens++
					if err := ls[(i+1)%3].Record(ctx, dup); err != nil {
						t.Errorf("record: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	var written, dups float64
	for _, l := range ls {
		written += counterValue(l.m.writes)
		dups += counterValue(l.m.duplicates)
	}
	if written != 10000 || dups != 2000 {
		t.Fatalf("written %g, duplicates %g; want 10000 and 2000", written, dups)
	}
	checkLedger(t, ls[0], expected(entries))
	checkScopes(t, ls[0], entries)
}

// Redis is killed during the load and restarted (empty, as after a crash
// without persistence). Every entry is confirmed written exactly once: before
// the kill into the old server, or after the restart into the new one, by
// the direct path or by replay from the buffer and the spill file. The new
// server holds exactly the entries confirmed into it.
func TestRedisKilledDuringLoad(t *testing.T) {
	srv := redistest.Start(t)
	entries := mixedEntries(3000, 2)
	spill := filepath.Join(t.TempDir(), "spill.jsonl")
	var (
		mu        sync.Mutex
		confirmed = map[string]time.Time{}
		twice     []string
	)
	after := func(_ context.Context, e *Entry, r Result) {
		mu.Lock()
		defer mu.Unlock()
		if r.Duplicate {
			return
		}
		if _, ok := confirmed[e.RequestID]; ok {
			twice = append(twice, e.RequestID)
		}
		confirmed[e.RequestID] = time.Now()
	}
	var ls []*Ledger
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCtx, stopRun := context.WithCancel(ctx)
	var runs sync.WaitGroup
	for i := range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		opts := Options{KeyPrefix: "sg:", Logger: quietLog(), AfterWrite: after, Buffer: 200,
			WriteTimeout: 200 * time.Millisecond, RetryInterval: 20 * time.Millisecond}
		if i == 0 {
			opts.SpillFile = spill // replica 0 overflows into its spill file
		} else {
			opts.Buffer = 5000
		}
		l := New(c, opts)
		ls = append(ls, l)
		runs.Add(1)
		go func() { defer runs.Done(); l.Run(runCtx) }()
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := ls[i%3].Record(ctx, entries[i]); err != nil {
					t.Errorf("record: %v", err)
				}
			}
		}()
	}
	var stopped, restarting time.Time
	for i := range entries {
		switch i {
		case 1000:
			srv.Stop()
			stopped = time.Now()
		case 2000:
			restarting = time.Now()
			srv.Restart()
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, l := range ls {
		for {
			n, spilled := l.Pending()
			if n == 0 && !spilled {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("replay did not finish: %d buffered, spill file %v", n, spilled)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	stopRun()
	runs.Wait()
	for _, l := range ls {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(twice) > 0 {
		t.Fatalf("%d entries confirmed twice, e.g. %s", len(twice), twice[0])
	}
	var inNew []Entry
	for i, e := range entries {
		at, ok := confirmed[e.RequestID]
		switch {
		case !ok:
			t.Fatalf("entry %s lost", e.RequestID)
		case i >= 1000 && i < 2000 && at.Before(restarting):
			// Recorded after the server was killed: nothing could take it
			// before the restart. (Entries recorded before the kill may be
			// confirmed a little after it: their reply was in flight, and
			// under load the confirmation runs late; stopped is only read
			// after Stop returns.)
			t.Fatalf("entry %s, recorded while Redis was down (stopped %s), confirmed at %s before the restart", e.RequestID,
				stopped.Format(time.StampMicro), at.Format(time.StampMicro))
		case !at.Before(restarting):
			inNew = append(inNew, e)
		}
	}
	if len(inNew) < 1000 {
		t.Fatalf("only %d entries went to the restarted server; the outage did not buffer", len(inNew))
	}
	if counterValue(ls[0].m.spilled) == 0 {
		t.Fatal("replica 0 never spilled: the spill path was not exercised")
	}
	var dropped float64
	for _, l := range ls {
		dropped += counterValue(l.m.dropped)
	}
	if dropped != 0 {
		t.Fatalf("%g entries dropped", dropped)
	}
	if _, err := os.Stat(spill); err == nil {
		t.Fatal("spill file left behind after replay")
	}
	checkLedger(t, ls[1], expected(inNew))
	checkScopes(t, ls[1], inNew)
	t.Logf("old server %d, new server %d (spilled %g, replayed %g/%g/%g)", len(entries)-len(inNew), len(inNew),
		counterValue(ls[0].m.spilled), counterValue(ls[0].m.replayed), counterValue(ls[1].m.replayed), counterValue(ls[2].m.replayed))
}
