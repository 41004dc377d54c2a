package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// Counters are the summed usage of a set of entries.
type Counters struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// TotalTokens is the provider's total (else input + output), counted
	// by every write since the counters by key and label came; a month
	// written before that lacks it.
	TotalTokens     int64         `json:"total_tokens"`
	CachedTokens    int64         `json:"cached_tokens"`
	ReasoningTokens int64         `json:"reasoning_tokens"`
	Cost            pricing.Money `json:"cost"`
	Streamed        int64         `json:"streamed"`
	Partial         int64         `json:"partial"`
}

func (c *Counters) set(name string, v int64) {
	switch name {
	case fieldRequests:
		c.Requests = v
	case fieldInput:
		c.InputTokens = v
	case fieldOutput:
		c.OutputTokens = v
	case fieldTotal:
		c.TotalTokens = v
	case fieldCached:
		c.CachedTokens = v
	case fieldReasoning:
		c.ReasoningTokens = v
	case fieldCost:
		c.Cost = pricing.Money(v)
	case fieldStreamed:
		c.Streamed = v
	case fieldPartial:
		c.Partial = v
	}
}

// Row is one model, backend and upstream key of a tenant.
type Row struct {
	Model   string `json:"model"`
	Backend string `json:"backend"`
	Key     string `json:"key"`
	Counters
}

// Day is one UTC day of the month.
type Day struct {
	Date string `json:"date"`
	Counters
}

// Report is a tenant's usage for one month.
type Report struct {
	Tenant   string   `json:"tenant"`
	Month    string   `json:"month"`
	Currency string   `json:"currency,omitempty"`
	Total    Counters `json:"total"`
	Rows     []Row    `json:"rows"`
	Days     []Day    `json:"days"`
}

// Query reads the tenant's month ("2006-01") in one pipeline: the month
// hash and each day's hash.
func (l *Ledger) Query(ctx context.Context, tenant, month string) (Report, error) {
	start, err := time.Parse("2006-01", month)
	if err != nil {
		return Report{}, fmt.Errorf("ledger: month %q: want YYYY-MM", month)
	}
	if tenant == "" {
		return Report{}, fmt.Errorf("ledger: no tenant")
	}
	var days []string
	for d := start; d.Month() == start.Month(); d = d.AddDate(0, 0, 1) {
		days = append(days, d.Format("2006-01-02"))
	}
	var monthCmd *redis.MapStringStringCmd
	dayCmds := make([]*redis.MapStringStringCmd, len(days))
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		monthCmd = p.HGetAll(ctx, MonthKey(l.opts.KeyPrefix, tenant, month))
		for i, d := range days {
			dayCmds[i] = p.HGetAll(ctx, DayKey(l.opts.KeyPrefix, tenant, d))
		}
		return nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("ledger: query %s %s: %w", tenant, month, err)
	}
	r := Report{Tenant: tenant, Month: month, Rows: []Row{}, Days: []Day{}}
	rows := map[string]*Row{}
	for f, v := range monthCmd.Val() {
		d, name, ok := splitField(f)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if d == totalDims {
			r.Total.set(name, n)
			continue
		}
		row := rows[d]
		if row == nil {
			parts := strings.SplitN(d, "|", 3)
			if len(parts) != 3 {
				continue
			}
			row = &Row{Model: parts[0], Backend: parts[1], Key: parts[2]}
			rows[d] = row
		}
		row.set(name, n)
	}
	for _, row := range rows {
		r.Rows = append(r.Rows, *row)
	}
	slices.SortFunc(r.Rows, func(a, b Row) int {
		if c := cmp.Compare(b.Cost, a.Cost); c != 0 {
			return c
		}
		return cmp.Compare(a.Model+"|"+a.Backend+"|"+a.Key, b.Model+"|"+b.Backend+"|"+b.Key)
	})
	for i, c := range dayCmds {
		var day Day
		for f, v := range c.Val() {
			d, name, ok := splitField(f)
			if !ok || d != totalDims {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			day.set(name, n)
		}
		if day.Requests > 0 {
			day.Date = days[i]
			r.Days = append(r.Days, day)
		}
	}
	return r, nil
}

// MonthCost is the tenant's spend in the month: one HGET.
func (l *Ledger) MonthCost(ctx context.Context, tenant, month string) (pricing.Money, error) {
	v, err := l.rdb.HGet(ctx, MonthKey(l.opts.KeyPrefix, tenant, month), TotalCostField).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: month cost of %s: %w", tenant, err)
	}
	return pricing.Money(v), nil
}

// splitField splits "<dims>|<counter>" at the last "|".
func splitField(f string) (dims, name string, ok bool) {
	i := strings.LastIndexByte(f, '|')
	if i <= 0 {
		return "", "", false
	}
	return f[:i], f[i+1:], true
}

// Lookup finds the entry of one request by the id its answer carried, while
// the ledger still remembers it (Options.DedupeTTL), under the first of
// tenants that holds it (entries live in their tenant's hash slot). found
// is false when none does; an entry written before entries were kept has
// only its id and tenant.
func (l *Ledger) Lookup(ctx context.Context, tenants []string, requestID string) (e Entry, found bool, err error) {
	for _, t := range tenants {
		v, err := l.rdb.Get(ctx, seenKey(l.opts.KeyPrefix, t, requestID)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return Entry{}, false, fmt.Errorf("ledger: lookup %s: %w", requestID, err)
		}
		if v != "1" {
			if err := json.Unmarshal([]byte(v), &e); err != nil {
				return Entry{}, false, fmt.Errorf("ledger: entry %s: %w", requestID, err)
			}
		}
		e.RequestID, e.Tenant = requestID, t // the key's, not stored again
		return e, true, nil
	}
	return Entry{}, false, nil
}
