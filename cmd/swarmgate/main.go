// Command swarmgate is the LLM traffic gateway for Envoy: control plane,
// ext_proc service, rate-limit service and admin in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/swarmgate/swarmgate/internal/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, runGateway: runGateway}
	os.Exit(c.run(ctx, os.Args[1:]))
}

// cli is one invocation's streams and the gateway it starts; tests swap
// runGateway to see the options a command line produces without serving.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	runGateway     func(context.Context, gateway.Options) error
}

func runGateway(ctx context.Context, opts gateway.Options) error {
	g, err := gateway.New(opts)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// Exit codes: 0 done (help included), 1 the command failed, 2 the command
// line is wrong (unknown command or flag, missing or extra arguments).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// run executes one command line and returns the process exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	root := c.root()
	root.SetArgs(longFlagsWithOneDash(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "%s: %v\n\n", cmd.CommandPath(), ue.err)
		cmd.SetOut(c.stderr)
		_ = cmd.Usage()
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "%s: %v\n", cmd.CommandPath(), err)
	return exitError
}

// root is the command tree.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "swarmgate",
		Short: "LLM traffic gateway for Envoy: xDS control plane, ext_proc, rate limits and admin",
		Long: `swarmgate is the LLM traffic gateway for Envoy: an xDS control plane, an ext_proc
service, a global rate-limit service and an admin server, in one binary.

Every flag can also be set with an environment variable: --config-file is
SWARMGATE_CONFIG_FILE, --log-level is SWARMGATE_LOG_LEVEL, and so on. A flag on
the command line wins over its variable.`,
		Version:                    buildVersion(),
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE:                       func(*cobra.Command, []string) error { return usageError{errors.New("a command is required")} },
		PersistentPreRunE:          flagsFromEnv,
		SilenceErrors:              true,
		SilenceUsage:               true,
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("swarmgate {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		c.roleCommand("serve", gateway.All,
			"run control plane, ext_proc, rate-limit service and admin in one process"),
		c.roleCommand("xds", gateway.Roles{ControlPlane: true, Admin: true},
			"run the xDS control plane alone"),
		c.roleCommand("extproc", gateway.Roles{ExtProc: true, Admin: true},
			"run the ext_proc service alone"),
		c.roleCommand("ratelimit", gateway.Roles{RateLimit: true, Admin: true},
			"run the rate-limit service alone"),
		validateCommand(),
		bootstrapCommand(),
		usageCommand(),
		keysCommand(),
		migrateCommand(),
		mockUpstreamCommand(),
		hashKeyCommand(),
		versionCommand(),
	)
	return root
}

// unknownCommand refuses arguments the root has no command for.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	err := fmt.Errorf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("unknown command %q (did you mean %q?)", args[0], s[0])
	}
	return usageError{err}
}
