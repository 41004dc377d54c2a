package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Format is how the Print functions write a report: an aligned table for
// people, or the JSON the admin listener's /usage answers, for scripts.
type Format int

const (
	FormatTable Format = iota
	FormatJSON
)

// printJSON writes v as /usage does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("ledger: writing JSON: %w", err)
	}
	return nil
}

// PrintUsage implements `swarmgate usage --tenant T --month YYYY-MM`: it
// queries the ledger and writes the report to w. An empty month means the
// current UTC month.
func PrintUsage(ctx context.Context, w io.Writer, f Format, rdb redis.UniversalClient, cfg *config.Config, tenant, month string) error {
	if _, ok := cfg.Tenant(tenant); !ok {
		return fmt.Errorf("%w %q", errNoTenant, tenant)
	}
	l := New(rdb, OptionsFrom(cfg))
	if month == "" {
		month = MonthOf(l.opts.Now())
	}
	rep, err := l.Query(ctx, tenant, month)
	if err != nil {
		return err
	}
	rep.Currency = cfg.Accounting.Currency
	if f == FormatJSON {
		return printJSON(w, rep)
	}
	return WriteTable(w, rep)
}

// WriteTable writes a report as an aligned text table, one line per model,
// backend and key, then the total.
func WriteTable(w io.Writer, r Report) error {
	fmt.Fprintf(w, "tenant %s, month %s, cost in %s\n\n", r.Tenant, r.Month, r.Currency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "MODEL\tBACKEND\tKEY\tREQUESTS\tINPUT\tCACHED\tOUTPUT\tREASONING\tCOST\t")
	line := func(model, backend, key string, c Counters) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", model, backend, key,
			c.Requests, c.InputTokens, c.CachedTokens, c.OutputTokens, c.ReasoningTokens, c.Cost.Short())
	}
	for _, row := range r.Rows {
		line(row.Model, row.Backend, row.Key, row.Counters)
	}
	line("TOTAL", "", "", r.Total)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("ledger: writing table: %w", err)
	}
	if r.Total.Partial > 0 {
		fmt.Fprintln(w, "\n"+strconv.FormatInt(r.Total.Partial, 10)+" partial (disconnected or reset) requests included")
	}
	return nil
}

// scopeLedger is the ledger a key or label report reads, and its month
// (empty: the current one); tenant, when given, must be configured.
func scopeLedger(rdb redis.UniversalClient, cfg *config.Config, tenant, month string) (*Ledger, string, error) {
	if tenant != "" {
		if _, ok := cfg.Tenant(tenant); !ok {
			return nil, "", fmt.Errorf("%w %q", errNoTenant, tenant)
		}
	}
	l := New(rdb, OptionsFrom(cfg))
	if month == "" {
		month = MonthOf(l.opts.Now())
	}
	return l, month, nil
}

// PrintKeyUsage implements `swarmgate usage --key ID`: a virtual key's days
// of the month, the month and all time. tenant narrows the search for the
// key's tenant (empty: every configured tenant).
func PrintKeyUsage(ctx context.Context, w io.Writer, f Format, rdb redis.UniversalClient, cfg *config.Config, tenant, keyID, month string) error {
	l, month, err := scopeLedger(rdb, cfg, tenant, month)
	if err != nil {
		return err
	}
	owner, found, err := l.keyTenant(ctx, cfg, tenant, keyID)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("ledger: key %s: %w", keyID, errNoKeyUsage)
	}
	rep, err := l.QueryKey(ctx, owner, keyID, month)
	if err != nil {
		return err
	}
	rep.Currency = cfg.Accounting.Currency
	if f == FormatJSON {
		return printJSON(w, rep)
	}
	fmt.Fprintf(w, "key %s (tenant %s), month %s, cost in %s\n\n", keyID, owner, month, rep.Currency)
	return writeScopeTable(w, rep, nil)
}

// PrintLabelUsage implements `swarmgate usage --label name=value`: the
// label's days, month and all time over every configured tenant (or
// tenant), then each tenant's share.
func PrintLabelUsage(ctx context.Context, w io.Writer, f Format, rdb redis.UniversalClient, cfg *config.Config, tenant string, lb Label, month string) error {
	l, month, err := scopeLedger(rdb, cfg, tenant, month)
	if err != nil {
		return err
	}
	rep, err := l.QueryLabel(ctx, tenantsOf(cfg, tenant), lb, month)
	if err != nil {
		return err
	}
	rep.Currency = cfg.Accounting.Currency
	if f == FormatJSON {
		return printJSON(w, rep)
	}
	fmt.Fprintf(w, "label %s, month %s, cost in %s\n\n", lb, month, rep.Currency)
	return writeScopeTable(w, rep.ScopeReport, rep.Tenants)
}

// writeScopeTable writes one line per day with usage, the month and all
// time, then each tenant's month and all time when there are several.
func writeScopeTable(w io.Writer, r ScopeReport, tenants []TenantScope) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PERIOD\tREQUESTS\tINPUT\tCACHED\tOUTPUT\tREASONING\tTOTAL TOKENS\tCOST\t")
	line := func(period string, c Counters) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", period,
			c.Requests, c.InputTokens, c.CachedTokens, c.OutputTokens, c.ReasoningTokens, c.TotalTokens, c.Cost.Short())
	}
	for _, d := range r.Days {
		line(d.Date, d.Counters)
	}
	line("MONTH "+r.Month, r.Total)
	line("ALL TIME", r.AllTime)
	if len(tenants) > 1 {
		for _, t := range tenants {
			line("tenant "+t.Tenant+" month", t.Total)
			line("tenant "+t.Tenant+" all time", t.AllTime)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("ledger: writing table: %w", err)
	}
	return nil
}
