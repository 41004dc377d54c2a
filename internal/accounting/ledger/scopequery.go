package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScopeReport is one virtual key's usage, or one label's (LabelReport):
// the month's totals, its days, and the all-time totals (since it first
// spent, within the retention).
type ScopeReport struct {
	Tenant   string   `json:"tenant,omitempty"`
	Key      string   `json:"key,omitempty"`
	Label    *Label   `json:"label,omitempty"`
	Month    string   `json:"month"`
	Currency string   `json:"currency,omitempty"`
	Total    Counters `json:"total"`
	AllTime  Counters `json:"all_time"`
	Days     []Day    `json:"days"`
}

// LabelReport is a label's usage over the tenants queried (a run may be
// spread over several tenants' keys), then per tenant that has any.
type LabelReport struct {
	ScopeReport
	Tenants []TenantScope `json:"tenants"`
}

// TenantScope is one tenant's part of a label's usage.
type TenantScope struct {
	Tenant  string   `json:"tenant"`
	Total   Counters `json:"total"`
	AllTime Counters `json:"all_time"`
}

func (c *Counters) add(o Counters) {
	c.Requests += o.Requests
	c.InputTokens += o.InputTokens
	c.OutputTokens += o.OutputTokens
	c.TotalTokens += o.TotalTokens
	c.CachedTokens += o.CachedTokens
	c.ReasoningTokens += o.ReasoningTokens
	c.Cost += o.Cost
	c.Streamed += o.Streamed
	c.Partial += o.Partial
}

// scopeCounters reads a scope hash (plain counter fields).
func scopeCounters(m map[string]string) Counters {
	var c Counters
	for f, v := range m {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			c.set(f, n)
		}
	}
	return c
}

func monthDays(month string) ([]string, error) {
	start, err := time.Parse("2006-01", month)
	if err != nil {
		return nil, fmt.Errorf("ledger: month %q: want YYYY-MM", month)
	}
	var days []string
	for d := start; d.Month() == start.Month(); d = d.AddDate(0, 0, 1) {
		days = append(days, d.Format("2006-01-02"))
	}
	return days, nil
}

// scopeReads are the pipelined reads of one scope in one tenant.
type scopeReads struct {
	month, all *redis.MapStringStringCmd
	days       []*redis.MapStringStringCmd
}

func readScope(ctx context.Context, p redis.Pipeliner, key func(period string) string, month string, days []string) scopeReads {
	r := scopeReads{month: p.HGetAll(ctx, key(periodMonth+month)), all: p.HGetAll(ctx, key(periodAll))}
	r.days = make([]*redis.MapStringStringCmd, len(days))
	for i, d := range days {
		r.days[i] = p.HGetAll(ctx, key(periodDay+d))
	}
	return r
}

// into adds the reads to rep; days sums day by day (same length as the
// month's days).
func (r scopeReads) into(rep *ScopeReport, days []Counters) (month, all Counters) {
	month, all = scopeCounters(r.month.Val()), scopeCounters(r.all.Val())
	rep.Total.add(month)
	rep.AllTime.add(all)
	for i, c := range r.days {
		days[i].add(scopeCounters(c.Val()))
	}
	return month, all
}

func finishDays(rep *ScopeReport, dates []string, days []Counters) {
	rep.Days = []Day{}
	for i, c := range days {
		if c.Requests > 0 {
			rep.Days = append(rep.Days, Day{Date: dates[i], Counters: c})
		}
	}
}

// FindKey returns the first of tenants under which the virtual key has
// ever spent (within the retention): one EXISTS each, in one pipeline.
func (l *Ledger) FindKey(ctx context.Context, tenants []string, keyID string) (tenant string, found bool, err error) {
	cmds := make([]*redis.IntCmd, len(tenants))
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tenants {
			cmds[i] = p.Exists(ctx, KeyScopeKey(l.opts.KeyPrefix, t, periodAll, keyID))
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("ledger: finding key %s: %w", keyID, err)
	}
	for i, c := range cmds {
		if c.Val() > 0 {
			return tenants[i], true, nil
		}
	}
	return "", false, nil
}

// QueryKey reads a virtual key's month ("2006-01"), its days and its
// all-time totals in one pipeline.
func (l *Ledger) QueryKey(ctx context.Context, tenant, keyID, month string) (ScopeReport, error) {
	dates, err := monthDays(month)
	if err != nil {
		return ScopeReport{}, err
	}
	key := func(period string) string { return KeyScopeKey(l.opts.KeyPrefix, tenant, period, keyID) }
	var reads scopeReads
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		reads = readScope(ctx, p, key, month, dates)
		return nil
	})
	if err != nil {
		return ScopeReport{}, fmt.Errorf("ledger: query key %s %s: %w", keyID, month, err)
	}
	rep := ScopeReport{Tenant: tenant, Key: keyID, Month: month}
	days := make([]Counters, len(dates))
	reads.into(&rep, days)
	finishDays(&rep, dates, days)
	return rep, nil
}

// QueryLabel reads a label's month, days and all-time totals under each of
// tenants, in one pipeline, summed and per tenant.
func (l *Ledger) QueryLabel(ctx context.Context, tenants []string, lb Label, month string) (LabelReport, error) {
	dates, err := monthDays(month)
	if err != nil {
		return LabelReport{}, err
	}
	reads := make([]scopeReads, len(tenants))
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tenants {
			key := func(period string) string { return LabelScopeKey(l.opts.KeyPrefix, t, period, lb) }
			reads[i] = readScope(ctx, p, key, month, dates)
		}
		return nil
	})
	if err != nil {
		return LabelReport{}, fmt.Errorf("ledger: query label %s %s: %w", lb, month, err)
	}
	rep := LabelReport{ScopeReport: ScopeReport{Label: &lb, Month: month}, Tenants: []TenantScope{}}
	days := make([]Counters, len(dates))
	for i, r := range reads {
		m, all := r.into(&rep.ScopeReport, days)
		if all.Requests > 0 || m.Requests > 0 {
			rep.Tenants = append(rep.Tenants, TenantScope{Tenant: tenants[i], Total: m, AllTime: all})
		}
	}
	finishDays(&rep.ScopeReport, dates, days)
	return rep, nil
}

// Ranked is one key's or label value's month totals in a ranking.
type Ranked struct {
	Tenant string   `json:"tenant"`
	Key    string   `json:"key,omitempty"`
	Label  *Label   `json:"label,omitempty"`
	Total  Counters `json:"total"`
}

// TopKeys are the n virtual keys that spent most in the month over
// tenants, with their exact month totals.
func (l *Ledger) TopKeys(ctx context.Context, tenants []string, month string, n int) ([]Ranked, error) {
	p := l.opts.KeyPrefix
	return l.top(ctx, tenants, n,
		func(t string) string { return keyRankKey(p, t, month) },
		func(t, m string) (string, Ranked) {
			return KeyScopeKey(p, t, periodMonth+month, m), Ranked{Tenant: t, Key: m}
		})
}

// TopLabels are the n values of the label name (the runs, for "run") that
// spent most in the month over tenants, with their exact month totals.
func (l *Ledger) TopLabels(ctx context.Context, tenants []string, month, name string, n int) ([]Ranked, error) {
	p := l.opts.KeyPrefix
	return l.top(ctx, tenants, n,
		func(t string) string { return labelRankKey(p, t, month, name) },
		func(t, m string) (string, Ranked) {
			lb := Label{Name: name, Value: m}
			return LabelScopeKey(p, t, periodMonth+month, lb), Ranked{Tenant: t, Label: &lb}
		})
}

// top reads each tenant's ranking (the cost as a float score: exact to
// 2^53 nano-units, enough to order), keeps the n best, then reads their
// exact counters.
func (l *Ledger) top(ctx context.Context, tenants []string, n int, rank func(tenant string) string,
	scope func(tenant, member string) (string, Ranked)) ([]Ranked, error) {
	if n <= 0 {
		return []Ranked{}, nil
	}
	ranks := make([]*redis.ZSliceCmd, len(tenants))
	if _, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tenants {
			ranks[i] = p.ZRevRangeWithScores(ctx, rank(t), 0, int64(n-1))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ledger: reading rankings: %w", err)
	}
	type cand struct {
		tenant, member string
		score          float64
	}
	var cands []cand
	for i, c := range ranks {
		for _, z := range c.Val() {
			m, _ := z.Member.(string)
			cands = append(cands, cand{tenants[i], m, z.Score})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.score, a.score) })
	cands = cands[:min(n, len(cands))]
	out := make([]Ranked, len(cands))
	cmds := make([]*redis.MapStringStringCmd, len(cands))
	if _, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cands {
			var key string
			key, out[i] = scope(c.tenant, c.member)
			cmds[i] = p.HGetAll(ctx, key)
		}
		return nil
	}); err != nil && len(cands) > 0 {
		return nil, fmt.Errorf("ledger: reading ranked counters: %w", err)
	}
	for i, c := range cmds {
		out[i].Total = scopeCounters(c.Val())
	}
	slices.SortStableFunc(out, func(a, b Ranked) int { return cmp.Compare(b.Total.Cost, a.Total.Cost) })
	return out, nil
}
