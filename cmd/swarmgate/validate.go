package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/config"
)

func validateCommand() *cobra.Command {
	var skip bool
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "check a config file; exit non-zero with file:line, field and reason",
		Long:  "Checks a config file. Exit 0 when valid; otherwise prints file:line: field: reason.",
		Args:  oneFile,
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := config.Load(a[0], config.Options{SkipSecrets: skip})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d backends, %d models, %d tenants)\n", a[0], len(cfg.Backends), len(cfg.Models), len(cfg.Tenants))
			return nil
		},
	}
	cmd.Flags().BoolVar(&skip, "skip-secrets", false, "do not resolve env:/file: secrets (check on a machine without them)")
	return cmd
}

func hashKeyCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "hash-key",
		Example: "  swarmgate hash-key < swarm.key",
		Short:   "print the stored hash of a virtual key read from stdin",
		Long:    "Reads one virtual key from stdin and prints its sha256: hash for tenants[].keys[].hash.",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && err != io.EOF {
				return fmt.Errorf("reading key: %w", err)
			}
			key := strings.TrimRight(line, "\r\n")
			if key == "" {
				return errors.New("no key on stdin")
			}
			fmt.Fprintln(cmd.OutOrStdout(), config.HashKey(key))
			return nil
		},
	}
}
