package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/config"
)

func validateCommand() *cobra.Command {
	var skip bool
	var print []string
	cmd := &cobra.Command{
		Use:     "validate FILE",
		Example: "  swarmgate validate gateway.yaml\n  swarmgate validate --print listen.admin,envoy.listener_port gateway.yaml",
		Short:   "check a config file; exit non-zero with file:line, field and reason",
		Long: "Checks a config file. Exit 0 when valid; otherwise prints file:line: field: reason.\n" +
			"--print prints the named settings of a valid config instead, one per line, defaults applied " +
			"(scripts find the ports a config moved): " + strings.Join(printableFields, ", ") + ".",
		Args: oneFile,
		RunE: func(cmd *cobra.Command, a []string) error {
			for _, f := range print {
				if !slices.Contains(printableFields, f) {
					return fmt.Errorf("--print %s: not one of %s", f, strings.Join(printableFields, ", "))
				}
			}
			cfg, err := config.Load(a[0], config.Options{SkipSecrets: skip})
			if err != nil {
				return err
			}
			if len(print) > 0 {
				for _, f := range print {
					fmt.Fprintln(cmd.OutOrStdout(), printField(cfg, f))
				}
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d backends, %d models, %d tenants)\n", a[0], len(cfg.Backends), len(cfg.Models), len(cfg.Tenants))
			return nil
		},
	}
	cmd.Flags().BoolVar(&skip, "skip-secrets", false, "do not resolve env:/file: secrets (check on a machine without them)")
	cmd.Flags().StringSliceVar(&print, "print", nil, "print these settings of the config, one per line, instead of the verdict")
	return cmd
}

// printableFields are the settings validate --print knows: the addresses
// a local run (scripts/run.sh) needs.
var printableFields = []string{"listen.xds", "listen.extproc", "listen.ratelimit", "listen.admin",
	"envoy.listener_address", "envoy.listener_port"}

func printField(c *config.Config, field string) string {
	switch field {
	case "listen.xds":
		return c.Listen.XDS
	case "listen.extproc":
		return c.Listen.ExtProc
	case "listen.ratelimit":
		return c.Listen.RateLimit
	case "listen.admin":
		return c.Listen.Admin
	case "envoy.listener_address":
		return c.Envoy.ListenerAddress
	case "envoy.listener_port":
		return strconv.FormatUint(uint64(c.Envoy.ListenerPort), 10)
	}
	return ""
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
