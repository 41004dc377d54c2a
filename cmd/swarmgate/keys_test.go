package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/subkey/subkeytest"
)

const keysAdminToken = "cli-admin-DISTINCTIVE-token-9f2e"

// startKeysAdmin runs an admin server with the key API over a real
// redis-server, on the embedded default config (tenant demo), and points
// the CLI at it through the environment.
func startKeysAdmin(t *testing.T) *subkey.Store {
	t.Helper()
	cfg, err := config.Parse(config.DefaultYAML(), "default.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store := subkeytest.Run(t, rdb, "sg:")
	lis, err := net.Listen("tcp", porttest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := admin.New(admin.Options{Config: func() *config.Config { return cfg }, SubKeys: store,
		Access: config.Admin{Token: config.SecretFromValue("env:T", keysAdminToken)}})
	go func() { done <- s.Run(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Setenv("SWARMGATE_ADMIN_URL", "http://"+lis.Addr().String())
	t.Setenv("SWARMGATE_ADMIN_TOKEN", keysAdminToken)
	return store
}

func TestKeysCommands(t *testing.T) {
	store := startKeysAdmin(t)
	cfg, _ := config.Parse(config.DefaultYAML(), "default.yaml", config.Options{SkipSecrets: true})

	r := execute(t, "", "keys", "create", "--tenant", "demo", "--rpm", "60", "--ttl", "24h", "--label", "run=r7", "--label", "agent=a1", "--minter")
	if r.code != exitOK {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	plain := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(plain, "sk-sg-") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("create printed %q", r.stdout)
	}
	if _, reason := (subkey.Auth{Store: store}).Authenticate(cfg, plain); reason != subkey.OK {
		t.Fatalf("the printed key does not authenticate: %v", reason)
	}
	id := strings.Fields(r.stderr)[1]
	if !strings.HasPrefix(id, "sk_") || !strings.Contains(r.stderr, "shown this once") {
		t.Fatalf("create stderr %q", r.stderr)
	}

	// The minter mints under its own tenant with its own limits.
	t.Setenv("SWARMGATE_ADMIN_TOKEN", plain)
	child := execute(t, "", "keys", "create", "--label", "agent=a2", "--json")
	if child.code != exitOK || !strings.Contains(child.stdout, `"api_key": "sk-sg-`) || !strings.Contains(child.stdout, `"parent": "`+id+`"`) {
		t.Fatalf("minted: exit %d\n%s%s", child.code, child.stdout, child.stderr)
	}
	over := execute(t, "", "keys", "create", "--rpm", "100")
	if over.code != exitError || !strings.Contains(over.stderr, "403 limits.rpm: must be at most the parent's 60") {
		t.Fatalf("over the minter's limit: exit %d %s", over.code, over.stderr)
	}
	t.Setenv("SWARMGATE_ADMIN_TOKEN", keysAdminToken)

	list := execute(t, "", "keys", "list", "--tenant", "demo", "--label", "run=r7")
	if list.code != exitOK || !strings.HasPrefix(list.stdout, "ID") || !strings.Contains(list.stdout, id) ||
		!strings.Contains(list.stdout, "60/-/-") || !strings.Contains(list.stdout, "agent=a1,run=r7") || strings.Count(list.stdout, "\n") != 2 {
		t.Fatalf("list: exit %d\n%s%s", list.code, list.stdout, list.stderr)
	}
	upd := execute(t, "", "keys", "update", id, "--rpm", "30", "--clear-labels", "--no-expiry")
	if upd.code != exitOK || !strings.Contains(upd.stdout, `"rpm": 30`) || strings.Contains(upd.stdout, "labels") || strings.Contains(upd.stdout, "expires_at") {
		t.Fatalf("update: exit %d\n%s%s", upd.code, upd.stdout, upd.stderr)
	}
	show := execute(t, "", "keys", "show", id)
	if show.code != exitOK || !strings.Contains(show.stdout, `"id": "`+id+`"`) {
		t.Fatalf("show: exit %d\n%s%s", show.code, show.stdout, show.stderr)
	}
	rev := execute(t, "", "keys", "revoke", id)
	if rev.code != exitOK || !strings.Contains(rev.stdout, `"revoked": true`) {
		t.Fatalf("revoke: exit %d\n%s%s", rev.code, rev.stdout, rev.stderr)
	}
	for _, out := range []result{list, upd, show, rev} {
		if strings.Contains(out.stdout+out.stderr, plain) {
			t.Fatalf("the key was printed again:\n%s", out.stdout)
		}
	}
	if _, reason := (subkey.Auth{Store: store}).Authenticate(cfg, plain); reason != subkey.Revoked {
		t.Fatalf("after revoke: %v", reason)
	}
}

func TestKeysCommandLine(t *testing.T) {
	t.Setenv("SWARMGATE_ADMIN_TOKEN", "x")
	for _, tc := range []struct {
		name string
		args []string
		code int
		head string // stderr's first line
	}{
		{"no subcommand", []string{"keys"}, exitUsage, "swarmgate keys: name a command: create, list, show, update or revoke"},
		{"unknown subcommand", []string{"keys", "frobnicate"}, exitUsage, `swarmgate keys: unknown command "frobnicate"`},
		{"show without id", []string{"keys", "show"}, exitUsage, "swarmgate keys show: want one key ID, got 0 arguments"},
		{"revoke two ids", []string{"keys", "revoke", "a", "b"}, exitUsage, "swarmgate keys revoke: want one key ID, got 2 arguments"},
		{"bad label", []string{"keys", "create", "--tenant", "t", "--label", "run"}, exitUsage, `swarmgate keys create: --label: want name=value, got "run"`},
		{"label twice", []string{"keys", "list", "--label", "a=1", "--label", "a=2"}, exitUsage, `swarmgate keys list: --label: "a" given twice`},
		{"ttl and expires-at", []string{"keys", "create", "--ttl", "1h", "--expires-at", "2099-01-01T00:00:00Z"}, exitUsage, "swarmgate keys create: give --ttl or --expires-at, not both"},
		{"budget options alone", []string{"keys", "create", "--budget-hard-cap"}, exitUsage, "swarmgate keys create: --budget-period, --budget-hard-cap and --budget-alert need --budget"},
		{"update nothing", []string{"keys", "update", "sk_1"}, exitUsage, "swarmgate keys update: nothing to change: give --rpm, --rpd, --tpm, --label, --ttl, --expires-at or --budget"},
		{"update contradiction", []string{"keys", "update", "sk_1", "--ttl", "1h", "--no-expiry"}, exitUsage, "swarmgate keys update: --no-expiry contradicts the ttl given"},
		{"bad admin url", []string{"keys", "list", "--admin-url", "127.0.0.1:19000"}, exitUsage, `swarmgate keys list: --admin-url: want http://host:port, got "127.0.0.1:19000"`},
		{"bad flag", []string{"keys", "create", "--rpm", "many"}, exitUsage, `swarmgate keys create: invalid argument "many" for "--rpm" flag: strconv.ParseInt: parsing "many": invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, "", tc.args...)
			if head, _, _ := strings.Cut(r.stderr, "\n"); r.code != tc.code || head != tc.head {
				t.Fatalf("exit %d %q, want %d %q", r.code, head, tc.code, tc.head)
			}
			if !strings.Contains(r.stderr, "\nUsage:\n") {
				t.Errorf("no usage after a usage error:\n%s", r.stderr)
			}
		})
	}
	t.Setenv("SWARMGATE_ADMIN_TOKEN", "")
	if r := execute(t, "", "keys", "list"); r.code != exitError || !strings.Contains(r.stderr, "SWARMGATE_ADMIN_TOKEN is not set") {
		t.Fatalf("without a token: exit %d %s", r.code, r.stderr)
	}
}
