package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redisconn"
)

// usageCommand reads the ledger in Redis directly, as the gateway writes
// it: it needs the config (for Redis and the tenants) and no admin port or
// token, so it also works from a bastion that reaches Redis only.
func usageCommand() *cobra.Command {
	var (
		flags                      common
		tenant, month, key, labelS string
		asJSON                     bool
	)
	cmd := &cobra.Command{
		Use:   "usage --tenant T | --key ID | --label NAME=VALUE",
		Short: "print usage and cost for a month from the ledger: a tenant's, a key's or a label's (a run's)",
		Long: `Prints the ledger for a month (--month, default this month, UTC).

  --tenant T          the tenant's requests, tokens and cost per model, backend
                      and upstream key, then its total
  --key ID            a virtual key's (a sub-key's sk_… or a config key's id):
                      each day, the month, and all time; --tenant narrows where
                      the key is looked for
  --label NAME=VALUE  a label's, e.g. --label run=nightly-42 for the bill of a
                      run: each day, the month and all time over every tenant
                      (or --tenant), then each tenant's share

Give one of --key and --label; --tenant alone asks for the tenant's report.
--json prints the report as /usage on the admin listener answers it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lb, err := checkUsageFlags(tenant, month, key, labelS, cmd.Flags().Changed("key"), cmd.Flags().Changed("label"))
			if err != nil {
				return err
			}
			cfg, err := flags.load(config.Options{SkipSecrets: true, ResolveRedisPassword: true})
			if err != nil {
				return err
			}
			rdb, err := redisconn.New(cfg.Redis)
			if err != nil {
				return err
			}
			defer rdb.Close()
			w, ctx, f := cmd.OutOrStdout(), cmd.Context(), ledger.FormatTable
			if asJSON {
				f = ledger.FormatJSON
			}
			switch {
			case key != "":
				return ledger.PrintKeyUsage(ctx, w, f, rdb, cfg, tenant, key, month)
			case lb != nil:
				return ledger.PrintLabelUsage(ctx, w, f, rdb, cfg, tenant, *lb, month)
			default:
				return ledger.PrintUsage(ctx, w, f, rdb, cfg, tenant, month)
			}
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant name (required without --key or --label)")
	cmd.Flags().StringVar(&key, "key", "", "virtual key id: a sub-key's sk_… or a config key's id")
	cmd.Flags().StringVar(&labelS, "label", "", "NAME=VALUE, e.g. run=nightly-42")
	cmd.Flags().StringVar(&month, "month", "", "YYYY-MM (default: this month, UTC)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON, as the admin listener's /usage answers it")
	return cmd
}

// checkUsageFlags refuses a wrong combination as a usage error (exit 2).
func checkUsageFlags(tenant, month, key, label string, keyGiven, labelGiven bool) (*ledger.Label, error) {
	switch {
	case keyGiven && labelGiven:
		return nil, usageError{errors.New("give one of --key and --label (counters are per key and per label)")}
	case keyGiven && strings.TrimSpace(key) == "":
		return nil, usageError{errors.New("--key needs a key id")}
	case !keyGiven && !labelGiven && strings.TrimSpace(tenant) == "":
		return nil, usageError{errors.New("--tenant, --key or --label is required")}
	}
	if month != "" {
		if _, err := time.Parse("2006-01", month); err != nil {
			return nil, usageError{fmt.Errorf("--month %q: want YYYY-MM", month)}
		}
	}
	if !labelGiven {
		return nil, nil
	}
	lb, ok := ledger.ParseLabel(label)
	if !ok {
		return nil, usageError{fmt.Errorf("--label %q: want NAME=VALUE", label)}
	}
	return &lb, nil
}
