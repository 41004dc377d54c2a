package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestReloadRetiresRemovedBackends: a reload that removes a backend takes
// its targets away at once and keeps the backend known for RetireAfter;
// then the config as written is in force. A newer reload in between wins.
func TestReloadRetiresRemovedBackends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	xdsL, epL, adminL := listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	render := func(backends, targets string) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, "listen: {xds: %s, extproc: %s, ratelimit: %s, admin: %s}\nredis: {addrs: [%s]}\nadmin: {token: env:ADMIN_TOKEN}\nbackends:\n",
			xdsL.Addr(), epL.Addr(), rlsAddr, adminL.Addr(), rs.Addr)
		for _, n := range backends {
			fmt.Fprintf(&b, "  - {name: relay-%c, base_url: \"http://127.0.0.1:1/v1\", keys: [{id: k%c, secret: env:RELAY_KEY_1}]}\n", n, n)
		}
		b.WriteString("models:\n  - name: small\n    targets:\n")
		for _, n := range targets {
			fmt.Fprintf(&b, "      - {backend: relay-%c}\n", n)
		}
		fmt.Fprintf(&b, "tenants:\n  - {name: team, keys: [{id: t1, hash: %s}], models: [\"*\"]}\n", config.HashKey("sk-team"))
		return []byte(b.String())
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(backends, targets string) {
		t.Helper()
		if err := os.WriteFile(path, render(backends, targets), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ab", "ab")
	const retire = 2 * time.Second
	g, stop := startServeWith(t, ctx, path, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL}, func(o *Options) { o.RetireAfter = retire })
	defer stop()
	known := func(c *config.Config, name string) bool { _, ok := c.Backend(name); return ok }
	targeted := func(c *config.Config, name string) bool {
		m, _ := c.Model("small")
		for _, tg := range m.Targets {
			if tg.Backend == name {
				return true
			}
		}
		return false
	}

	write("a", "a")
	var removedAt time.Time
	eventually(t, ctx, "relay-b's target removed", func() bool {
		c := g.Config()
		if !targeted(c, "relay-b") && removedAt.IsZero() {
			removedAt = time.Now()
		}
		return !targeted(c, "relay-b")
	})
	if !known(g.Config(), "relay-b") {
		t.Fatal("relay-b was forgotten with its target: attempts Envoy still routes there would be refused")
	}
	eventually(t, ctx, "relay-b retired", func() bool { return !known(g.Config(), "relay-b") })
	if held := time.Since(removedAt); held < retire-200*time.Millisecond {
		t.Errorf("relay-b forgotten %s after its target went, want about %s", held, retire)
	}

	// Removed again, then added back before the second step: the newer
	// reload wins and relay-b stays.
	write("ab", "ab")
	eventually(t, ctx, "relay-b back", func() bool { return targeted(g.Config(), "relay-b") })
	write("a", "a")
	eventually(t, ctx, "relay-b's target removed again", func() bool { return !targeted(g.Config(), "relay-b") })
	write("ab", "ab")
	eventually(t, ctx, "relay-b back again", func() bool { return targeted(g.Config(), "relay-b") })
	time.Sleep(retire + 500*time.Millisecond)
	if c := g.Config(); !known(c, "relay-b") || !targeted(c, "relay-b") {
		t.Fatal("a cancelled second step removed relay-b after it was added back")
	}
}
