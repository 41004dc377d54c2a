package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageError is a wrong command line: exit code 2 and the command's usage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// args checks the positional arguments with check and reports a mismatch
// as a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// noArgs refuses positional arguments.
var noArgs = args(cobra.NoArgs)

// oneFile wants exactly one positional argument, a file.
func oneFile(_ *cobra.Command, a []string) error {
	if len(a) != 1 {
		return usageError{fmt.Errorf("want one FILE, got %d arguments", len(a))}
	}
	return nil
}

// Flag annotations.
const (
	// annotationAlias on a flag names the flag it is another spelling of
	// (--config for --config-file): a variable never overrides a value
	// given under the other name.
	annotationAlias = "swarmgate/alias-of"
	// annotationNoEnv on a command turns the SWARMGATE_* fallback off.
	annotationNoEnv = "swarmgate/no-env"
)

// alias registers name as another spelling of the string flag of, on p.
func alias(fs *pflag.FlagSet, p *string, name, of string) {
	fs.StringVar(p, name, "", "short for --"+of)
	_ = fs.SetAnnotation(name, annotationAlias, []string{of})
}

// flagsFromEnv sets every flag not given on the command line from its
// SWARMGATE_<FLAG> variable, when that is set.
func flagsFromEnv(cmd *cobra.Command, _ []string) error {
	if cmd.Annotations[annotationNoEnv] != "" {
		return nil
	}
	fs := cmd.Flags()
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) {
		given[f.Name] = true
		for _, of := range f.Annotations[annotationAlias] {
			given[of] = true
		}
	})
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || given[f.Name] || f.Name == "help" || f.Name == "version" {
			return
		}
		for _, of := range f.Annotations[annotationAlias] {
			if given[of] {
				return
			}
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", envName(f.Name), e)
			}
		}
	})
	return err
}

// envName is the variable of a flag: config-file is SWARMGATE_CONFIG_FILE.
func envName(flagName string) string {
	return "SWARMGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// longFlagsWithOneDash rewrites -name and -name=value to the --name form
// when name is a long flag of the command args run: the command line
// before this one (Go's flag package) accepted both spellings, and scripts
// written for it keep working.
func longFlagsWithOneDash(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) < 3 || a[0] != '-' || a[1] == '-' || len(name) < 2 {
			continue
		}
		if name == "help" || cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
}
