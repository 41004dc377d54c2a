package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redisconn"
)

func usageCommand() *cobra.Command {
	var (
		flags         common
		tenant, month string
	)
	cmd := &cobra.Command{
		Use:   "usage --tenant T",
		Short: "print a tenant's usage and cost for a month from the ledger",
		Long:  "Prints the tenant's ledger: requests, tokens and cost per model, backend and key.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(tenant) == "" {
				return usageError{errors.New("--tenant is required")}
			}
			cfg, err := flags.load(config.Options{SkipSecrets: true})
			if err != nil {
				return err
			}
			rdb, err := redisconn.New(cfg.Redis)
			if err != nil {
				return err
			}
			defer rdb.Close()
			return ledger.PrintUsage(cmd.Context(), cmd.OutOrStdout(), rdb, cfg, tenant, month)
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant name (required)")
	cmd.Flags().StringVar(&month, "month", "", "YYYY-MM (default: this month, UTC)")
	return cmd
}
