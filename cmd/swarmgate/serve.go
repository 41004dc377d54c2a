package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/bootstrap"
)

// common are the flags every long-running command shares.
type common struct {
	configFile string
	logLevel   string
	logFormat  string
	nodeID     string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config-file", "", "gateway config (YAML); empty: the embedded default config")
	fs.StringVar(&c.configFile, "config", "", "short for --config-file")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or text")
	host, _ := os.Hostname()
	fs.StringVar(&c.nodeID, "node-id", host, "this process's id in xDS and shared state")
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o := &slog.HandlerOptions{Level: lvl}
	switch c.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	default:
		return nil, fmt.Errorf("--log-format: want json or text, got %q", c.logFormat)
	}
}

// load reads the config file, or the embedded default when none is named.
func (c *common) load(opts config.Options) (*config.Config, error) {
	if c.configFile == "" {
		return config.Parse(config.DefaultYAML(), "embedded default config", opts)
	}
	return config.Load(c.configFile, opts)
}

func runRoles(ctx context.Context, name string, roles gateway.Roles, args []string, stderr io.Writer) error {
	var c common
	fs := newFlags(name, stderr)
	c.register(fs)
	fromXDS := false
	if roles == (gateway.Roles{ExtProc: true, Admin: true}) {
		fs.BoolVar(&fromXDS, "from-xds", false, "take the gateway config from the control plane (envoy.xds_address of --config-file) instead of watching the file")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: swarmgate %s [flags]\n\n", name)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	redis.SetLogger(redisLogger{log})
	if roles.RateLimit {
		// envoyproxy/ratelimit logs through logrus' global logger.
		rlservice.RouteLibraryLogs(log.With("component", "ratelimit"))
	}
	// Only ext_proc needs upstream key values; the control plane and the
	// rate-limit service run without the Secret (fleets keep keys off them).
	// Every process serving the admin API needs admin.token.
	load := config.Options{SkipSecrets: !roles.ExtProc, ResolveAdminToken: roles.Admin}
	cfg, err := c.load(load)
	if err != nil {
		return err
	}
	opts := gateway.Options{Roles: roles, Initial: cfg, Load: load, Logger: log, Version: version, NodeID: c.nodeID, FromXDS: fromXDS}
	if c.configFile != "" && !fromXDS {
		opts.ConfigPath, opts.Initial = c.configFile, nil
	}
	g, err := gateway.New(opts)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	return runRoles(ctx, "serve", gateway.All, args, stderr)
}

func runXDS(ctx context.Context, args []string, _, stderr io.Writer) error {
	return runRoles(ctx, "xds", gateway.Roles{ControlPlane: true, Admin: true}, args, stderr)
}

func runExtProc(ctx context.Context, args []string, _, stderr io.Writer) error {
	return runRoles(ctx, "extproc", gateway.Roles{ExtProc: true, Admin: true}, args, stderr)
}

func runRateLimit(ctx context.Context, args []string, _, stderr io.Writer) error {
	return runRoles(ctx, "ratelimit", gateway.Roles{RateLimit: true, Admin: true}, args, stderr)
}

func runBootstrap(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("bootstrap", stderr)
	c.register(fs)
	admin := fs.String("envoy-admin", bootstrap.DefaultAdminAddress, "Envoy's admin listener (host:port; keep it on loopback)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swarmgate bootstrap [--config-file F] [--node-id ID] [--envoy-admin HOST:PORT]\n\nPrints an Envoy bootstrap (YAML) whose ADS cluster points at this control plane.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(config.Options{SkipSecrets: true})
	if err != nil {
		return err
	}
	b, err := bootstrap.Build(cfg, c.nodeID, bootstrap.Options{AdminAddress: *admin})
	if err != nil {
		return err
	}
	out, err := bootstrap.Marshal(b)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func runMockUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return mockupstream.Command(ctx, args, stdout, stderr)
}

func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("usage", stderr)
	c.register(fs)
	tenant := fs.String("tenant", "", "tenant name (required)")
	month := fs.String("month", "", "YYYY-MM (default: this month, UTC)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swarmgate usage --tenant T [--month YYYY-MM] [--config-file F]\n\nPrints the tenant's ledger: requests, tokens and cost per model, backend and key.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if strings.TrimSpace(*tenant) == "" {
		fs.Usage()
		return errUsage
	}
	cfg, err := c.load(config.Options{SkipSecrets: true})
	if err != nil {
		return err
	}
	rdb, err := redisconn.New(cfg.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return ledger.PrintUsage(ctx, stdout, rdb, cfg, *tenant, *month)
}
