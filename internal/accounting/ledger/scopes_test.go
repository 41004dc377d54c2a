package ledger

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// scopeID names a key's or label's counters in one tenant, for the sums
// the tests expect.
type scopeID struct {
	tenant, key string
	label       Label
}

func entryCounters(e *Entry) Counters {
	return Counters{Requests: 1, InputTokens: e.Usage.PromptTokens, OutputTokens: e.Usage.CompletionTokens,
		TotalTokens: e.Usage.TotalTokens, CachedTokens: e.Usage.CachedTokens, ReasoningTokens: e.Usage.ReasoningTokens,
		Cost: e.Cost, Streamed: b2i(e.Streamed), Partial: b2i(e.Partial)}
}

// expectedScopes sums entries (all of one month) per tenant and key, and
// per tenant and label.
func expectedScopes(entries []Entry) map[scopeID]Counters {
	out := map[scopeID]Counters{}
	for i := range entries {
		e := &entries[i]
		ids := []scopeID{{tenant: e.Tenant, key: e.VirtualKeyID}}
		for n, v := range e.Labels {
			ids = append(ids, scopeID{tenant: e.Tenant, label: Label{n, v}})
		}
		for _, id := range ids {
			c := out[id]
			c.add(entryCounters(e))
			out[id] = c
		}
	}
	return out
}

// checkScopes compares every key's and label's month and all-time counters
// (the entries are all of December 2026) and the days' sum with the sums
// of the entries, and each label's sum over tenants.
func checkScopes(t *testing.T, l *Ledger, entries []Entry) {
	t.Helper()
	want := expectedScopes(entries)
	byLabel := map[Label]Counters{}
	for id, c := range want {
		var rep ScopeReport
		var err error
		if id.key != "" {
			rep, err = l.QueryKey(t.Context(), id.tenant, id.key, "2026-12")
		} else {
			var lr LabelReport
			lr, err = l.QueryLabel(t.Context(), []string{id.tenant}, id.label, "2026-12")
			rep = lr.ScopeReport
			s := byLabel[id.label]
			s.add(c)
			byLabel[id.label] = s
		}
		if err != nil {
			t.Fatal(err)
		}
		if rep.Total != c || rep.AllTime != c {
			t.Fatalf("%+v: month %+v, all time %+v, want %+v", id, rep.Total, rep.AllTime, c)
		}
		var days Counters
		for _, d := range rep.Days {
			days.add(d.Counters)
		}
		if days != c {
			t.Fatalf("%+v: days sum to %+v, want %+v", id, days, c)
		}
	}
	for lb, c := range byLabel {
		rep, err := l.QueryLabel(t.Context(), []string{"acme", "beta", "gamma", "nobody"}, lb, "2026-12")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Total != c || rep.AllTime != c {
			t.Fatalf("label %s over tenants: %+v, want %+v", lb, rep.Total, c)
		}
	}
}

// Counters by key and by label: a duplicate report counts once in every
// scope, day, month and all time are kept apart, a run spanning two months
// has its whole total in one read, and a label name with "=" does not run
// into another label.
func TestKeyAndLabelCounters(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	ctx := t.Context()
	u := pricing.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, CachedTokens: 30}
	nov := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	entries := []Entry{
		{RequestID: "a", Tenant: "acme", VirtualKeyID: "sk_1", Labels: map[string]string{"run": "n-42", "team": "red"}, Time: nov, Usage: u, Cost: 500},
		{RequestID: "b", Tenant: "acme", VirtualKeyID: "sk_1", Labels: map[string]string{"run": "n-42"}, Time: testTime, Usage: u, Cost: 700, Streamed: true},
		{RequestID: "c", Tenant: "acme", VirtualKeyID: "sk_2", Labels: map[string]string{"run": "n-43", "a=b": "c"}, Time: testTime, Usage: u, Cost: 9000},
		{RequestID: "d", Tenant: "beta", VirtualKeyID: "sk_9", Labels: map[string]string{"run": "n-42", "a": "b=c"}, Time: testTime, Usage: u, Cost: 1},
		{RequestID: "e", Tenant: "acme", VirtualKeyID: "v1", Time: testTime, Usage: pricing.Usage{PromptTokens: 5, CompletionTokens: 5}, Cost: 3},
	}
	for _, e := range entries {
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	dup := entries[1]
	dup.Usage.PromptTokens, dup.Cost = 999, 999
	if err := l.Record(ctx, dup); err != nil {
		t.Fatal(err)
	}
	one := entryCounters(&entries[1])
	rep, err := l.QueryKey(ctx, "acme", "sk_1", "2026-12")
	if err != nil {
		t.Fatal(err)
	}
	all := one
	all.add(entryCounters(&entries[0]))
	if rep.Total != one || rep.AllTime != all || len(rep.Days) != 1 || rep.Days[0].Date != "2026-12-02" || rep.Days[0].Counters != one {
		t.Fatalf("key sk_1: %+v", rep)
	}
	if rep, _ := l.QueryKey(ctx, "acme", "v1", "2026-12"); rep.Total.TotalTokens != 10 {
		t.Fatalf("total tokens without the provider's total: %+v", rep.Total)
	}
	run, err := l.QueryLabel(ctx, []string{"acme", "beta", "gamma"}, Label{"run", "n-42"}, "2026-12")
	if err != nil {
		t.Fatal(err)
	}
	if run.Total.Requests != 2 || run.Total.Cost != 701 || run.AllTime.Requests != 3 || run.AllTime.Cost != 1201 || run.AllTime.TotalTokens != 360 {
		t.Fatalf("run n-42: month %+v, all time %+v", run.Total, run.AllTime)
	}
	wantTenants := []TenantScope{{Tenant: "acme", Total: one, AllTime: all}, {Tenant: "beta", Total: entryCounters(&entries[3]), AllTime: entryCounters(&entries[3])}}
	if !reflect.DeepEqual(run.Tenants, wantTenants) {
		t.Fatalf("run n-42 per tenant %+v", run.Tenants)
	}
	for _, tc := range []struct {
		lb   Label
		cost pricing.Money
	}{{Label{"a=b", "c"}, 9000}, {Label{"a", "b=c"}, 1}, {Label{"a", "b"}, 0}} {
		r, err := l.QueryLabel(ctx, []string{"acme", "beta"}, tc.lb, "2026-12")
		if err != nil || r.Total.Cost != tc.cost {
			t.Errorf("label %s: %+v %v, want cost %d", tc.lb, r.Total, err, tc.cost)
		}
	}
	if tenant, found, err := l.FindKey(ctx, []string{"beta", "acme"}, "sk_1"); err != nil || !found || tenant != "acme" {
		t.Fatalf("FindKey = %q %v %v", tenant, found, err)
	}
	if _, found, _ := l.FindKey(ctx, []string{"acme"}, "sk_none"); found {
		t.Fatal("FindKey found a key that never spent")
	}
	checkTop(t, l)
}

func checkTop(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := t.Context()
	keys, err := l.TopKeys(ctx, []string{"acme", "beta"}, "2026-12", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Key != "sk_2" || keys[0].Total.Cost != 9000 || keys[1].Key != "sk_1" || keys[1].Total.Cost != 700 {
		t.Fatalf("top keys %+v", keys)
	}
	runs, err := l.TopLabels(ctx, []string{"acme", "beta"}, "2026-12", "run", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(len(runs))
	for _, r := range runs {
		got += fmt.Sprintf(" %s/%s=%d", r.Tenant, r.Label, r.Total.Cost)
	}
	if want := "3 acme/run=n-43=9000 acme/run=n-42=700 beta/run=n-42=1"; got != want {
		t.Fatalf("top runs %s, want %s", got, want)
	}
	if nov, _ := l.TopLabels(ctx, []string{"acme"}, "2026-11", "run", 10); len(nov) != 1 || nov[0].Total.Cost != 500 {
		t.Fatalf("November runs %+v", nov)
	}
}

// Every key an entry touches has the retention as its TTL; an entry's keys
// are bounded by its (bounded) labels.
func TestScopeKeysExpireAndAreBounded(t *testing.T) {
	l, _, rdb := newTestLedger(t, Options{Retention: 48 * time.Hour})
	labels := map[string]string{}
	for i := range MaxLabels + 5 {
		labels[fmt.Sprintf("l%02d", i)] = "v"
	}
	e := Entry{RequestID: "x", Tenant: "acme", VirtualKeyID: "sk_1", Labels: labels, Time: testTime, Usage: pricing.Usage{PromptTokens: 1}, Cost: 1}
	if err := l.Record(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// seen, tenant month and day, the key's 3 and ranking, 3 and a
	// ranking per label.
	if want := 3 + 4 + 4*MaxLabels; len(keys) != want {
		t.Fatalf("%d keys, want %d: %v", len(keys), want, keys)
	}
	for _, k := range keys {
		ttl := rdb.TTL(t.Context(), k).Val()
		if k == seenKey("sg:", "acme", "x") {
			continue
		}
		if ttl <= 47*time.Hour || ttl > 48*time.Hour {
			t.Errorf("%s: TTL %s, want the retention", k, ttl)
		}
	}
}
