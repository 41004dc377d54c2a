package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// keyInfo is what list prints of a key; show, update and revoke print the
// API's JSON as it is.
type keyInfo struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Parent string `json:"parent"`
	Limits struct {
		RPM int `json:"rpm"`
		RPD int `json:"rpd"`
		TPM int `json:"tpm"`
	} `json:"limits"`
	Models    []string          `json:"models"`
	ExpiresAt time.Time         `json:"expires_at"`
	Labels    map[string]string `json:"labels"`
	Minter    bool              `json:"minter"`
	Revoked   bool              `json:"revoked"`
	Expired   bool              `json:"expired"`
}

func keysCreateCommand() *cobra.Command {
	var (
		admin        adminFlags
		fields       keyFields
		tenant       string
		models       []string
		class        string
		minter, asJS bool
	)
	cmd := &cobra.Command{
		Use: "create [--tenant T] [flags]",
		Example: `  SWARMGATE_ADMIN_TOKEN=... swarmgate keys create --tenant team-red --rpm 60 --ttl 24h --label run=r7
  KEY=$(swarmgate keys create --label agent=a1)   # with a minter key: its own tenant`,
		Short: "create a sub-key and print it (shown this once)",
		Long: `Creates a sub-key and prints the key on stdout, once: swarmgate keeps only
its hash, so it cannot be shown again. Its id and tenant go to stderr.

With the admin token, --tenant is required. With a minter key the tenant is
the minter's, and what is not given (limits, models, class, expiry) is the
minter's own; nothing may exceed it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := fields.body(cmd.Flags())
			if err != nil {
				return err
			}
			for _, f := range []struct {
				flag, member string
				v            any
			}{{"tenant", "tenant", tenant}, {"model", "models", models}, {"class", "class", class}, {"minter", "minter", minter}} {
				if cmd.Flags().Changed(f.flag) {
					body[f.member] = f.v
				}
			}
			c, err := admin.client()
			if err != nil {
				return err
			}
			var out struct {
				APIKey string          `json:"api_key"`
				Key    json.RawMessage `json:"key"`
			}
			if err := c.do(cmd.Context(), http.MethodPost, "/v1/keys", body, &out); err != nil {
				return err
			}
			return printCreated(cmd.OutOrStdout(), cmd.ErrOrStderr(), out.APIKey, out.Key, asJS)
		},
	}
	admin.register(cmd.Flags())
	fields.register(cmd.Flags())
	cmd.Flags().StringVar(&tenant, "tenant", "", "the key's tenant (the admin must name it; a minter's is its own)")
	cmd.Flags().StringSliceVar(&models, "model", nil, "allowed model (repeat or comma-separate; default: all of the tenant's, or the minter's)")
	cmd.Flags().StringVar(&class, "class", "", "admission class of the key's requests")
	cmd.Flags().BoolVar(&minter, "minter", false, "the key may mint sub-keys of its tenant (admin only)")
	cmd.Flags().BoolVar(&asJS, "json", false, "print the whole answer as JSON (the key included)")
	return cmd
}

func printCreated(stdout, stderr io.Writer, plain string, key json.RawMessage, asJSON bool) error {
	var k keyInfo
	if err := json.Unmarshal(key, &k); err != nil || plain == "" {
		return fmt.Errorf("admin API: unexpected answer to create")
	}
	if asJSON {
		return writeIndented(stdout, map[string]any{"api_key": plain, "key": key})
	}
	fmt.Fprintln(stdout, plain)
	fmt.Fprintf(stderr, "created %s for tenant %s; the key above is shown this once\n", k.ID, k.Tenant)
	return nil
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func keysListCommand() *cobra.Command {
	var (
		admin  adminFlags
		tenant string
		labels []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list [--tenant T] [--label name=value]...",
		Example: "  swarmgate keys list --tenant team-red --label run=r7",
		Short:   "list sub-keys (a minter: its own tenant's)",
		Long:    "Lists sub-keys, one a line: id, tenant, state, limits, expiry and labels. A key must carry every --label given.",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := parseLabels(labels); err != nil {
				return err
			}
			q := url.Values{}
			if tenant != "" {
				q.Set("tenant", tenant)
			}
			if len(labels) > 0 {
				q["label"] = labels
			}
			c, err := admin.client()
			if err != nil {
				return err
			}
			var out struct {
				Keys []json.RawMessage `json:"keys"`
			}
			path := "/v1/keys"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			if err := c.do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeIndented(cmd.OutOrStdout(), out)
			}
			return printKeys(cmd.OutOrStdout(), out.Keys)
		},
	}
	admin.register(cmd.Flags())
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's keys")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only keys with this label name=value (repeat for more)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

func printKeys(w io.Writer, raw []json.RawMessage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSTATE\tRPM/RPD/TPM\tEXPIRES\tLABELS")
	for _, r := range raw {
		var k keyInfo
		if err := json.Unmarshal(r, &k); err != nil {
			return fmt.Errorf("admin API: decoding a key: %w", err)
		}
		state := "active"
		switch {
		case k.Revoked:
			state = "revoked"
		case k.Expired:
			state = "expired"
		case k.Minter:
			state = "minter"
		}
		expires := "-"
		if !k.ExpiresAt.IsZero() {
			expires = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, state,
			limit(k.Limits.RPM)+"/"+limit(k.Limits.RPD)+"/"+limit(k.Limits.TPM), expires, labelList(k.Labels))
	}
	return tw.Flush()
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func labelList(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	out := make([]string, 0, len(l))
	for n, v := range l {
		out = append(out, n+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// oneKeyCommand is show and revoke: one key id, the key's JSON printed.
func oneKeyCommand(use, short, long, method, suffix string) *cobra.Command {
	var admin adminFlags
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Long:  long,
		Args:  oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := admin.client()
			if err != nil {
				return err
			}
			return printKey(cmd, c, method, "/v1/keys/"+url.PathEscape(args[0])+suffix, nil)
		},
	}
	admin.register(cmd.Flags())
	return cmd
}

func printKey(cmd *cobra.Command, c *adminClient, method, path string, body any) error {
	var out struct {
		Key json.RawMessage `json:"key"`
	}
	if err := c.do(cmd.Context(), method, path, body, &out); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out.Key, "", "  "); err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(cmd.OutOrStdout())
	return err
}

func keysShowCommand() *cobra.Command {
	return oneKeyCommand("show", "print one sub-key as JSON (never the key itself)",
		"Prints a sub-key's limits, models, expiry, labels, budget and state as JSON.", http.MethodGet, "")
}

func keysRevokeCommand() *cobra.Command {
	return oneKeyCommand("revoke", "revoke a sub-key",
		`Revokes a sub-key: every replica refuses it (key_revoked) within moments. The
key stays listed. A minter may revoke its own tenant's keys.`, http.MethodPost, "/revoke")
}

func keysUpdateCommand() *cobra.Command {
	var (
		admin                           adminFlags
		fields                          keyFields
		noExpiry, clearLabels, noBudget bool
	)
	cmd := &cobra.Command{
		Use:     "update ID [flags]",
		Example: "  swarmgate keys update sk_0123456789abcdef --rpm 120 --ttl 48h --label run=r8",
		Short:   "change a sub-key's limits, labels, expiry or budget (admin only)",
		Long: `Changes what is given and keeps the rest: each of --rpm, --rpd and --tpm alone;
--label replaces all labels; --ttl (from now) or --expires-at sets the expiry;
--budget replaces the budget. The admin token is required.`,
		Args: oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := fields.body(cmd.Flags())
			if err != nil {
				return err
			}
			if err := clearing(body, noExpiry, clearLabels, noBudget); err != nil {
				return err
			}
			if len(body) == 0 {
				return usageError{fmt.Errorf("nothing to change: give --rpm, --rpd, --tpm, --label, --ttl, --expires-at or --budget")}
			}
			c, err := admin.client()
			if err != nil {
				return err
			}
			return printKey(cmd, c, http.MethodPatch, "/v1/keys/"+url.PathEscape(args[0]), body)
		},
	}
	admin.register(cmd.Flags())
	fields.register(cmd.Flags())
	cmd.Flags().BoolVar(&noExpiry, "no-expiry", false, "remove the expiry")
	cmd.Flags().BoolVar(&clearLabels, "clear-labels", false, "remove every label")
	cmd.Flags().BoolVar(&noBudget, "no-budget", false, "remove the budget")
	return cmd
}

// clearing adds the nulls that remove expiry, labels or budget.
func clearing(body map[string]any, noExpiry, clearLabels, noBudget bool) error {
	for _, c := range []struct {
		on          bool
		member, flg string
		with        []string
	}{
		{noExpiry, "expires_at", "--no-expiry", []string{"ttl", "expires_at"}},
		{clearLabels, "labels", "--clear-labels", []string{"labels"}},
		{noBudget, "budget", "--no-budget", []string{"budget"}},
	} {
		if !c.on {
			continue
		}
		for _, w := range c.with {
			if _, ok := body[w]; ok {
				return usageError{fmt.Errorf("%s contradicts the %s given", c.flg, w)}
			}
		}
		body[c.member] = nil
	}
	return nil
}
