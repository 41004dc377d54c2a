package ledger

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// PrintUsage implements `swarmgate usage --tenant T --month YYYY-MM`: it
// queries the ledger and writes a table to w. An empty month means the
// current UTC month.
func PrintUsage(ctx context.Context, w io.Writer, rdb redis.UniversalClient, cfg *config.Config, tenant, month string) error {
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
