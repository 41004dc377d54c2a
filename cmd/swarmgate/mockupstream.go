package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

func mockUpstreamCommand() *cobra.Command {
	// The mock's flags are defined on a Go FlagSet by its package (tests
	// there parse them too); cobra takes them over as they are.
	gfs := flag.NewFlagSet("mock-upstream", flag.ContinueOnError)
	f := mockupstream.RegisterFlags(gfs)
	verbose := gfs.Bool("v", false, "log every request (key ids only, never keys)")
	cmd := &cobra.Command{
		Use:   "mock-upstream",
		Short: "run an OpenAI-compatible fake upstream (demos, load tests)",
		Long:  "Serves a fake OpenAI-compatible provider for tests and `make run`.",
		Args:  noArgs,
		// Its flags never had SWARMGATE_* fallbacks: a container's
		// SWARMGATE_CONFIG must not reach the mock's --config.
		Annotations: map[string]string{annotationNoEnv: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mockupstream.Serve(cmd.Context(), f, *verbose, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().AddGoFlagSet(gfs)
	return cmd
}
