// Command swarmgate is the LLM traffic gateway for Envoy: control plane,
// ext_proc service, rate-limit service and admin in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand.
type command struct {
	name  string
	short string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run control plane, ext_proc, rate-limit service and admin in one process", runServe},
		{"xds", "run the xDS control plane alone", runXDS},
		{"extproc", "run the ext_proc service alone", runExtProc},
		{"ratelimit", "run the rate-limit service alone", runRateLimit},
		{"validate", "check a config file; exit non-zero with file:line, field and reason", runValidate},
		{"bootstrap", "print an Envoy bootstrap pointing at this control plane", runBootstrap},
		{"usage", "print a tenant's usage and cost for a month from the ledger", runUsage},
		{"mock-upstream", "run an OpenAI-compatible fake upstream (demos, load tests)", runMockUpstream},
		{"hash-key", "print the stored hash of a virtual key read from stdin", runHashKey},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "swarmgate %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "swarmgate: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: swarmgate <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
	}
	fmt.Fprintln(w, "\nRun 'swarmgate <command> --help' for a command's flags. Every flag can also be set")
	fmt.Fprintln(w, "with an environment variable: --config-file is SWARMGATE_CONFIG_FILE, --log-level is\nSWARMGATE_LOG_LEVEL, and so on.")
}

// newFlags returns a FlagSet whose flags fall back to SWARMGATE_* env vars.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("swarmgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, applying SWARMGATE_<FLAG> env vars to flags not
// given on the command line.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", envName(f.Name), e)
			}
		}
	})
	return err
}

func envName(flagName string) string {
	b := []byte("SWARMGATE_" + flagName)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
