package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/gateway"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
)

// common are the flags every long-running command shares.
type common struct {
	configFile string
	logLevel   string
	logFormat  string
	nodeID     string
}

func (c *common) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.configFile, "config-file", "", "gateway config (YAML); empty: the embedded default config")
	alias(fs, &c.configFile, "config", "config-file")
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

// roleCommand is serve, xds, extproc or ratelimit: the gateway running the
// given roles.
func (c *cli) roleCommand(name string, roles gateway.Roles, short string) *cobra.Command {
	var (
		flags   common
		fromXDS bool
	)
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := flags.gatewayOptions(roles, fromXDS, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return c.runGateway(cmd.Context(), opts)
		},
	}
	flags.register(cmd.Flags())
	if roles == (gateway.Roles{ExtProc: true, Admin: true}) {
		cmd.Flags().BoolVar(&fromXDS, "from-xds", false, "take the gateway config from the control plane (envoy.xds_address of --config-file) instead of watching the file")
	}
	return cmd
}

// gatewayOptions loads the config and sets up logging for a process
// running roles.
func (c *common) gatewayOptions(roles gateway.Roles, fromXDS bool, logTo io.Writer) (gateway.Options, error) {
	log, err := c.logger(logTo)
	if err != nil {
		return gateway.Options{}, err
	}
	redis.SetLogger(redisLogger{log})
	if roles.RateLimit {
		// envoyproxy/ratelimit logs through logrus' global logger.
		rlservice.RouteLibraryLogs(log.With("component", "ratelimit"))
	}
	// Only ext_proc needs upstream key values; the control plane and the
	// rate-limit service run without the Secret (fleets keep keys off them).
	// Every process serving the admin API needs admin.token, and every
	// role opens Redis.
	load := config.Options{SkipSecrets: !roles.ExtProc, ResolveAdminToken: roles.Admin, ResolveRedisPassword: true}
	cfg, err := c.load(load)
	if err != nil {
		return gateway.Options{}, err
	}
	opts := gateway.Options{Roles: roles, Initial: cfg, Load: load, Logger: log, Version: buildVersion(), NodeID: c.nodeID, FromXDS: fromXDS}
	if c.configFile != "" && !fromXDS {
		opts.ConfigPath, opts.Initial = c.configFile, nil
	}
	return opts, nil
}
