package replica

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/xds/server"
)

const base = `
backends:
  - name: relay
    base_url: http://127.0.0.1:18101/v1
    keys: [{id: relay-1, secret: env:RELAY_KEY}]
tenants:
  - name: team
    keys: [{id: team-1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}]
    models: ["*"]
models:
`

func parse(t *testing.T, models ...string) *config.Config {
	t.Helper()
	y := base
	for _, m := range models {
		y += "  - {name: " + m + ", targets: [{backend: relay}]}\n"
	}
	cfg, err := config.Parse([]byte(y), "test.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startServer(t *testing.T, cp *server.ControlPlane) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func runReplica(t *testing.T, cc *grpc.ClientConn, env map[string]string) <-chan *config.Config {
	t.Helper()
	got := make(chan *config.Config, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := Options{NodeID: "replica-" + t.Name(), Load: config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}}}
	go func() { done <- Run(ctx, cc, opts, func(c *config.Config) { got <- c }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return got
}

func next(t *testing.T, ch <-chan *config.Config) *config.Config {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no config update within 10s")
		return nil
	}
}

// TestReplicaReceivesConfig: an ext_proc replica is configured over xDS, with
// the upstream key resolved from its own environment, and follows edits.
func TestReplicaReceivesConfig(t *testing.T) {
	cp := server.New(server.Options{})
	if err := cp.SetConfig(parse(t, "gpt-4o")); err != nil {
		t.Fatal(err)
	}
	updates := runReplica(t, startServer(t, cp), map[string]string{"RELAY_KEY": "sk-local-value"})

	c := next(t, updates)
	if _, ok := c.Model("gpt-4o"); !ok {
		t.Fatal("model gpt-4o missing from the replica's config")
	}
	if got := c.Backends[0].Keys[0].Secret.Value(); got != "sk-local-value" {
		t.Errorf("secret resolved to %q on the replica, want the local value", got)
	}
	if _, ok := c.LookupKey("nope"); ok {
		t.Error("lookup index broken")
	}

	if err := cp.SetConfig(parse(t, "gpt-4o", "claude")); err != nil {
		t.Fatal(err)
	}
	c = next(t, updates)
	if _, ok := c.Model("claude"); !ok {
		t.Fatal("edit did not reach the replica")
	}
}

// TestReplicaRejectsUnresolvableConfig: a replica that cannot resolve a
// secret reference NACKs the update (the control plane counts it) and never
// applies it.
func TestReplicaRejectsUnresolvableConfig(t *testing.T) {
	reg := prometheus.NewRegistry()
	cp := server.New(server.Options{Registerer: reg})
	if err := cp.SetConfig(parse(t, "gpt-4o")); err != nil {
		t.Fatal(err)
	}
	updates := runReplica(t, startServer(t, cp), map[string]string{}) // RELAY_KEY not set here
	deadline := time.Now().Add(10 * time.Second)
	for {
		if nacks(t, reg) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the control plane saw no NACK within 10s")
		}
		select {
		case c := <-updates:
			t.Fatalf("an unresolvable config was applied: %v", c.Source)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case c := <-updates:
		t.Fatalf("an unresolvable config was applied: %v", c.Source)
	default:
	}
}

func nacks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "nacks_total") {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestReplicaFollowsSecretFile: a replica whose config reads a provider key
// from a file: secret applies the config again when that file changes on
// its side (the control plane sends nothing: the config is the same).
func TestReplicaFollowsSecretFile(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "relay.key")
	if err := os.WriteFile(keyFile, []byte("sk-v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(base, "env:RELAY_KEY", "file:"+keyFile, 1) + "  - {name: gpt-4o, targets: [{backend: relay}]}\n"
	cfg, err := config.Parse([]byte(y), "test.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	cp := server.New(server.Options{})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	got := make(chan *config.Config, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := Options{NodeID: "replica-" + t.Name(), SecretPoll: 20 * time.Millisecond}
	cc := startServer(t, cp)
	go func() { done <- Run(ctx, cc, opts, func(c *config.Config) { got <- c }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if v := next(t, got).Backends[0].Keys[0].Secret.Value(); v != "sk-v1" {
		t.Fatalf("first config's key %q, want sk-v1", v)
	}
	tmp := keyFile + ".tmp"
	if err := os.WriteFile(tmp, []byte("sk-v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, keyFile); err != nil {
		t.Fatal(err)
	}
	if v := next(t, got).Backends[0].Keys[0].Secret.Value(); v != "sk-v2" {
		t.Fatalf("after the rotation the key is %q, want sk-v2", v)
	}
	select {
	case c := <-got:
		t.Fatalf("applied again with nothing changed (key %q)", c.Backends[0].Keys[0].Secret.Value())
	case <-time.After(200 * time.Millisecond):
	}
}
