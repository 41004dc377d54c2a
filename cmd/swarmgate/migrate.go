package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/litellm"
)

// migrateCommand groups the converters from other gateways' configs.
func migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:                        "migrate SOURCE",
		Short:                      "convert another gateway's config into a swarmgate config (litellm)",
		Long:                       "Converts another gateway's config into a first draft of a swarmgate config (docs/migration.md).",
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("name the config to convert: litellm")}
		},
	}
	cmd.AddCommand(migrateLiteLLMCommand())
	return cmd
}

func migrateLiteLLMCommand() *cobra.Command {
	var in, out string
	cmd := &cobra.Command{
		Use:     "litellm --in FILE",
		Example: "  swarmgate migrate litellm --in litellm.yaml --out gateway.yaml",
		Short:   "convert a LiteLLM proxy config (model_list, router_settings)",
		Long: `Converts a LiteLLM proxy config (model_list, router_settings) into a swarmgate
config: the config on stdout (or --out), what could not be carried over as
notes on stderr, one a line. Inline API keys are never copied: they become
env: references to fill in. The result always validates; review it, add
tenants, then check it with 'swarmgate validate --skip-secrets'.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" {
				return usageError{errors.New("--in is required (a LiteLLM config file, or - for stdin)")}
			}
			return migrateLiteLLM(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), in, out)
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "the LiteLLM proxy config (YAML); - reads stdin")
	cmd.Flags().StringVar(&out, "out", "", "write the swarmgate config here instead of stdout")
	return cmd
}

func migrateLiteLLM(stdin io.Reader, stdout, stderr io.Writer, in, out string) error {
	var (
		src []byte
		err error
	)
	if in == "-" {
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(in)
	}
	if err != nil {
		return err
	}
	res, err := litellm.Convert(src)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if out == "" {
		_, err = stdout.Write(res.YAML)
	} else {
		err = os.WriteFile(out, res.YAML, 0o644)
	}
	if err != nil {
		return err
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	if out != "" {
		fmt.Fprintf(stderr, "wrote %s (%d notes to finish by hand)\n", out, len(res.Notes))
	}
	return nil
}
