package main

import (
	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/xds/bootstrap"
)

func bootstrapCommand() *cobra.Command {
	var (
		flags common
		admin string
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "print an Envoy bootstrap pointing at this control plane",
		Long:  "Prints an Envoy bootstrap (YAML) whose ADS cluster points at this control plane.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.load(config.Options{SkipSecrets: true})
			if err != nil {
				return err
			}
			b, err := bootstrap.Build(cfg, flags.nodeID, bootstrap.Options{AdminAddress: admin})
			if err != nil {
				return err
			}
			out, err := bootstrap.Marshal(b)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVar(&admin, "envoy-admin", bootstrap.DefaultAdminAddress, "Envoy's admin listener (host:port; keep it on loopback)")
	return cmd
}
