package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

func TestRecordAndQuery(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries := []Entry{
		{RequestID: "a", Tenant: "acme", Model: "gpt", Backend: "openai", KeyID: "k1", Time: testTime,
			Usage: pricing.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 40}, Cost: 1000, Streamed: true},
		{RequestID: "b", Tenant: "acme", Model: "gpt", Backend: "openai", KeyID: "k1", Time: testTime.Add(24 * time.Hour),
			Usage: pricing.Usage{PromptTokens: 10, CompletionTokens: 5, ReasoningTokens: 2}, Cost: 50, Partial: true},
		{RequestID: "c", Tenant: "acme", Model: "claude", Backend: "relay", KeyID: "k9", Time: testTime,
			Usage: pricing.Usage{PromptTokens: 1, CompletionTokens: 1}, Cost: 7},
		// duplicate report of "a" with different numbers: ignored
		{RequestID: "a", Tenant: "acme", Model: "gpt", Backend: "openai", KeyID: "k1", Time: testTime,
			Usage: pricing.Usage{PromptTokens: 999}, Cost: 99999},
		// other tenant and other month: not in the report
		{RequestID: "d", Tenant: "other", Model: "gpt", Time: testTime, Usage: pricing.Usage{PromptTokens: 5}, Cost: 5},
		{RequestID: "e", Tenant: "acme", Model: "gpt", Time: testTime.AddDate(0, 1, 0), Usage: pricing.Usage{PromptTokens: 5}, Cost: 5},
	}
	var results []Result
	l.opts.AfterWrite = func(_ context.Context, _ *Entry, r Result) { results = append(results, r) }
	for _, e := range entries {
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if !results[3].Duplicate || results[3].MonthCost != 1057 {
		t.Fatalf("duplicate write result = %+v, want duplicate with month cost 1057", results[3])
	}
	rep, err := l.Query(ctx, "acme", "2026-12")
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{Requests: 3, InputTokens: 111, OutputTokens: 26, TotalTokens: 137, CachedTokens: 40, ReasoningTokens: 2, Cost: 1057, Streamed: 1, Partial: 1}
	if rep.Total != want {
		t.Fatalf("total = %+v, want %+v", rep.Total, want)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Model != "gpt" || rep.Rows[0].Requests != 2 || rep.Rows[1].Key != "k9" {
		t.Fatalf("rows = %+v", rep.Rows)
	}
	if len(rep.Days) != 2 || rep.Days[0].Date != "2026-12-02" || rep.Days[0].Requests != 2 || rep.Days[1].Cost != 50 {
		t.Fatalf("days = %+v", rep.Days)
	}
	if c, err := l.MonthCost(ctx, "acme", "2026-12"); err != nil || c != 1057 {
		t.Fatalf("MonthCost = %d, %v", c, err)
	}
	if c, err := l.MonthCost(ctx, "nobody", "2026-12"); err != nil || c != 0 {
		t.Fatalf("MonthCost(nobody) = %d, %v", c, err)
	}
	if _, err := l.Query(ctx, "acme", "2026-13"); err == nil {
		t.Fatal("bad month accepted")
	}
}

// An operator finds a request's entry by the id its client quotes, under
// its tenant or by trying every tenant; a duplicate report does not replace
// it.
func TestLookupByRequestID(t *testing.T) {
	l, _, rdb := newTestLedger(t, Options{})
	ctx := t.Context()
	e := Entry{RequestID: "sg-1", Tenant: "acme", Model: "gpt", UpstreamModel: "relay-gpt", Backend: "relay", KeyID: "k1",
		VirtualKeyID: "sk_0123", Labels: map[string]string{"run": "r-7", "team": "search"}, Status: 200, Time: testTime, Usage: pricing.Usage{PromptTokens: 10, CompletionTokens: 2}, Cost: 12, Streamed: true}
	if err := l.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	dup := e
	dup.Usage.PromptTokens, dup.Backend = 999, "other"
	if err := l.Record(ctx, dup); err != nil {
		t.Fatal(err)
	}
	for _, tenants := range [][]string{{"acme"}, {"other", "acme"}} {
		got, found, err := l.Lookup(ctx, tenants, "sg-1")
		if err != nil || !found {
			t.Fatalf("Lookup(%v) = %v, %v", tenants, found, err)
		}
		if !got.Time.Equal(e.Time) {
			t.Errorf("time %s, want %s", got.Time, e.Time)
		}
		got.Time = e.Time
		if !reflect.DeepEqual(got, e) {
			t.Errorf("Lookup(%v) = %+v, want %+v", tenants, got, e)
		}
	}
	if _, found, err := l.Lookup(ctx, []string{"other"}, "sg-1"); err != nil || found {
		t.Errorf("under another tenant: found %v, %v", found, err)
	}
	// An entry recorded before entries were kept: its id and tenant.
	if err := rdb.Set(ctx, seenKey("sg:", "acme", "sg-old"), "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got, found, err := l.Lookup(ctx, []string{"acme"}, "sg-old"); err != nil || !found || got.RequestID != "sg-old" || got.Tenant != "acme" {
		t.Errorf("old entry: %+v %v %v", got, found, err)
	}
}

// The stored detail decodes into the entry it was written from (request
// id and tenant come from the key; the time is kept to the second).
func TestDetailRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{Model: "m", Backend: "b", KeyID: "k", Time: testTime},
		{Model: `odd "model" \ name`, UpstreamModel: "vendor/m-2024\u00e9", Backend: "relay", KeyID: "k-1", Status: 200,
			Usage: pricing.Usage{PromptTokens: 1 << 40, CompletionTokens: 7, TotalTokens: 9, CachedTokens: 3, ReasoningTokens: 2, CacheWriteTokens: 1},
			Cost:  pricing.FromFloat(1.25), Time: testTime.Add(1500 * time.Millisecond), Streamed: true, Partial: true},
		{Model: "m", Backend: "b", KeyID: "k", VirtualKeyID: "sk_1", Labels: map[string]string{"z": "", "a\"b": "v\u00e9"}, Time: testTime},
	} {
		var got Entry
		if err := json.Unmarshal([]byte(e.detail()), &got); err != nil {
			t.Fatalf("%s: %v", e.detail(), err)
		}
		e.Time = e.Time.Truncate(time.Second)
		if !got.Time.Equal(e.Time) {
			t.Errorf("time %s, want %s", got.Time, e.Time)
		}
		got.Time = e.Time
		if !reflect.DeepEqual(got, e) {
			t.Errorf("decoded %+v\nwant    %+v\nfrom %s", got, e, e.detail())
		}
	}
}

// Labels an entry keeps are bounded: at most MaxLabels, the first by name,
// none empty-named or over the length limits; labels within bounds are kept
// as they are.
func TestBoundLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 4 {
		many[fmt.Sprintf("l%02d", i)] = "v"
	}
	long := strings.Repeat("x", MaxLabelValueBytes+1)
	for _, tc := range []struct {
		name string
		in   map[string]string
		want int
		drop []string
	}{
		{"none", nil, 0, nil},
		{"within", map[string]string{"run": "r1", "team": ""}, 2, nil},
		{"too many", many, MaxLabels, []string{"l16", "l17", "l18", "l19"}},
		{"too long", map[string]string{"run": "r1", "blob": long, strings.Repeat("n", MaxLabelNameBytes+1): "v", "": "v"}, 1, []string{"blob", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BoundLabels(tc.in)
			if len(got) != tc.want {
				t.Fatalf("%d labels, want %d: %v", len(got), tc.want, got)
			}
			for _, n := range tc.drop {
				if _, ok := got[n]; ok {
					t.Errorf("kept %q", n)
				}
			}
		})
	}
}

// A sub-key's id and labels reach the stored entry, bounded.
func TestRecordKeepsKeyAndLabels(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	ctx := t.Context()
	labels := map[string]string{"run": "r-9", "blob": strings.Repeat("x", MaxLabelValueBytes+1)}
	e := Entry{RequestID: "sg-2", Tenant: "acme", Model: "gpt", Backend: "relay", KeyID: "k1", VirtualKeyID: "sk_42", Labels: labels, Time: testTime}
	if err := l.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, found, err := l.Lookup(ctx, []string{"acme"}, "sg-2")
	if err != nil || !found {
		t.Fatalf("lookup: %v %v", found, err)
	}
	if got.VirtualKeyID != "sk_42" || !reflect.DeepEqual(got.Labels, map[string]string{"run": "r-9"}) {
		t.Fatalf("entry %+v", got)
	}
}
