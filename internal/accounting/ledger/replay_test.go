package ledger

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// loadHalfway runs the first pipeline in two halves and loads the record
// script between them, as another replica does when a restarted Redis (or
// one cluster node) has lost its script cache: the first half fails with
// NOSCRIPT, the second lands.
type loadHalfway struct {
	loader *redis.Client
	done   bool
}

func (h *loadHalfway) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loadHalfway) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *loadHalfway) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.done || len(cmds) < 2 {
			return next(ctx, cmds)
		}
		h.done = true
		half := len(cmds) / 2
		err := next(ctx, cmds[:half])
		if lerr := recordScript.Load(ctx, h.loader).Err(); lerr != nil {
			return lerr
		}
		if err2 := next(ctx, cmds[half:]); err == nil {
			err = err2
		}
		return err
	}
}

// A replay pipeline that meets a script cache reloaded halfway reports the
// entries that landed and resends only the others: resent, a landed entry
// came back as a duplicate, so its write was never reported (budgets
// observed no new spend, the writes metric missed it).
func TestReplayReportsWritesBeforeScriptReload(t *testing.T) {
	l, srv, rdb := newTestLedger(t, Options{})
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&loadHalfway{loader: srv.Client()})
	var fresh, dups int
	l.opts.AfterWrite = func(_ context.Context, _ *Entry, r Result) {
		if r.Duplicate {
			dups++
		} else {
			fresh++
		}
	}
	batch := make([]Entry, 8)
	for i := range batch {
		batch[i] = Entry{RequestID: "r" + string(rune('a'+i)), Tenant: "acme", Model: "gpt", Time: testTime,
			Usage: pricing.Usage{PromptTokens: 10}, Cost: 1}
	}
	if failed, err := l.writeBatch(ctx, batch); err != nil || len(failed) > 0 {
		t.Fatalf("writeBatch: %d failed, %v", len(failed), err)
	}
	if fresh != len(batch) || dups != 0 {
		t.Fatalf("reported %d new writes and %d duplicates; want %d and 0", fresh, dups, len(batch))
	}
	if got := counterValue(l.m.writes); got != float64(len(batch)) {
		t.Fatalf("writes metric %g, want %d", got, len(batch))
	}
	if c, err := l.MonthCost(ctx, "acme", "2026-12"); err != nil || c != pricing.Money(len(batch)) {
		t.Fatalf("month cost %d, %v; want %d", c, err, len(batch))
	}
}
