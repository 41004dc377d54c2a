package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// keysCommand groups the sub-key commands: clients of the admin key API
// (/v1/keys) on a running swarmgate.
func keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys COMMAND",
		Short: "create, list, show, update and revoke sub-keys through the admin API",
		Long: `Manages sub-keys, virtual keys minted at run time under a config tenant
(docs/subkeys.md), through the admin key API of a running swarmgate.

The credential is read from SWARMGATE_ADMIN_TOKEN, never from the command
line: the admin token (admin.token), or a minter sub-key, which acts for its
own tenant only. --admin-url (SWARMGATE_ADMIN_URL) is the admin listener.`,
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("name a command: create, list, show, update or revoke")}
		},
	}
	cmd.AddCommand(keysCreateCommand(), keysListCommand(), keysShowCommand(), keysUpdateCommand(), keysRevokeCommand())
	return cmd
}

// adminFlags reach the admin API.
type adminFlags struct {
	url     string
	timeout time.Duration
}

func (a *adminFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.url, "admin-url", "http://127.0.0.1:19000", "the admin listener (listen.admin)")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long to wait for the admin API")
}

// client checks the flags and the environment and returns an API client.
func (a *adminFlags) client() (*adminClient, error) {
	u, err := url.Parse(a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("--admin-url: want http://host:port, got %q", a.url)}
	}
	tok := strings.TrimSpace(os.Getenv("SWARMGATE_ADMIN_TOKEN"))
	if tok == "" {
		return nil, errors.New("SWARMGATE_ADMIN_TOKEN is not set: the admin token, or a minter key")
	}
	return newAdminClient(strings.TrimRight(u.String(), "/"), tok, a.timeout), nil
}

// oneID wants exactly one positional argument, a key id.
func oneID(_ *cobra.Command, a []string) error {
	if len(a) != 1 {
		return usageError{fmt.Errorf("want one key ID, got %d arguments", len(a))}
	}
	return nil
}

// keyFields are the flags create and update share; only the flags given
// go into the request, so what a minter leaves out stays its own.
type keyFields struct {
	rpm, rpd, tpm int
	ttl, expires  string
	labels        []string
	budget        float64
	period        string
	hardCap       bool
	alerts        []float64
}

func (k *keyFields) register(fs *pflag.FlagSet) {
	fs.IntVar(&k.rpm, "rpm", 0, "requests per minute (0: unlimited)")
	fs.IntVar(&k.rpd, "rpd", 0, "requests per day (0: unlimited)")
	fs.IntVar(&k.tpm, "tpm", 0, "tokens per minute (0: unlimited)")
	fs.StringVar(&k.ttl, "ttl", "", "lifetime: a duration (24h, 90m) or seconds")
	fs.StringVar(&k.expires, "expires-at", "", "expiry, RFC 3339 (2026-12-31T23:59:59Z)")
	fs.StringArrayVar(&k.labels, "label", nil, "label name=value (repeat for more)")
	fs.Float64Var(&k.budget, "budget", 0, "budget amount in the accounting currency")
	fs.StringVar(&k.period, "budget-period", "run", "budget period: run, day or month")
	fs.BoolVar(&k.hardCap, "budget-hard-cap", false, "refuse requests once the budget is spent")
	fs.Float64SliceVar(&k.alerts, "budget-alert", nil, "alert at this percentage of the budget (repeat or comma-separate)")
}

// body returns the members of a create or update request for the flags
// given on the command line.
func (k *keyFields) body(fs *pflag.FlagSet) (map[string]any, error) {
	b := map[string]any{}
	limits := map[string]int{}
	for name, v := range map[string]int{"rpm": k.rpm, "rpd": k.rpd, "tpm": k.tpm} {
		if fs.Changed(name) {
			limits[name] = v
		}
	}
	if len(limits) > 0 {
		b["limits"] = limits
	}
	if fs.Changed("ttl") && fs.Changed("expires-at") {
		return nil, usageError{errors.New("give --ttl or --expires-at, not both")}
	}
	if fs.Changed("ttl") {
		b["ttl"] = k.ttl
	}
	if fs.Changed("expires-at") {
		b["expires_at"] = k.expires
	}
	if fs.Changed("label") {
		labels, err := parseLabels(k.labels)
		if err != nil {
			return nil, err
		}
		b["labels"] = labels
	}
	if fs.Changed("budget") {
		b["budget"] = map[string]any{"amount": k.budget, "period": k.period, "hard_cap": k.hardCap, "alerts": k.alerts}
	} else if fs.Changed("budget-period") || fs.Changed("budget-hard-cap") || fs.Changed("budget-alert") {
		return nil, usageError{errors.New("--budget-period, --budget-hard-cap and --budget-alert need --budget")}
	}
	return b, nil
}

// parseLabels reads name=value pairs; a name given twice is refused, as
// the API refuses it.
func parseLabels(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		n, v, ok := strings.Cut(p, "=")
		if !ok || n == "" {
			return nil, usageError{fmt.Errorf("--label: want name=value, got %q", p)}
		}
		if _, dup := out[n]; dup {
			return nil, usageError{fmt.Errorf("--label: %q given twice", n)}
		}
		out[n] = v
	}
	return out, nil
}
