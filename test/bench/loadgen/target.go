package loadgen

import (
	"context"
	"fmt"
	"google.golang.org/grpc/credentials"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/telemetry"
	"github.com/swarmgate/swarmgate/test/bench/baseline"
)

// Targets the load generator can drive.
const (
	TargetBaseline = "baseline"
	// TargetBaselinePlain is the do-nothing server on grpc-go's own codec
	// (protobuf-go), as a do-nothing ext_proc written from scratch would
	// be; TargetBaseline shares swarmgate's codec (extproc/envoymsg).
	TargetBaselinePlain = "baseline-plain"
	TargetSwarmgate     = "swarmgate"
)

// BenchConfig is the gateway config the swarmgate target serves: one
// tenant with the virtual key VirtualKey, one model alias on one backend
// with four upstream keys. renamed gives the target an upstream model
// name (per-attempt body rewrite); redisAddr, when set, is the Redis the
// ledger writes to.
func BenchConfig(renamed bool, redisAddr string) (*config.Config, error) {
	target := `{backend: ` + benchBackend + `}`
	if renamed {
		target = `{backend: ` + benchBackend + `, model: ` + renamedModel + `}`
	}
	y := `
request:
  max_body_bytes: 8388608
backends:
  - name: ` + benchBackend + `
    base_url: http://127.0.0.1:9/v1
    auth: bearer
    keys:
      - {id: openai-1, secret: env:K1}
      - {id: openai-2, secret: env:K2}
      - {id: openai-3, secret: env:K3}
      - {id: openai-4, secret: env:K4}
models:
  - name: ` + benchModel + `
    targets: [` + target + `]
tenants:
  - name: ` + benchTenant + `
    models: [` + benchModel + `]
    keys:
      - {id: ` + benchKeyID + `, hash: ` + config.HashKey(VirtualKey) + `}
`
	if redisAddr != "" {
		y += "redis:\n  addrs: [\"" + redisAddr + "\"]\n"
	}
	env := map[string]string{"K1": "sk-up-1", "K2": "sk-up-2", "K3": "sk-up-3", "K4": "sk-up-4"}
	return config.Parse([]byte(y), "bench.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
}

// TargetOptions configure NewTarget.
type TargetOptions struct {
	RenameModel bool
	// RedisAddr, for the swarmgate target, makes the ledger write every
	// request to this Redis (accounting/ledger).
	RedisAddr string
	Logger    *slog.Logger
	// StreamWorkers, when set, is grpc.NumStreamWorkers: streams run on a
	// fixed set of goroutines whose stacks stay grown, instead of a new
	// goroutine (and stack growth) per stream.
	StreamWorkers uint32
	// Creds are the listener's transport credentials (nil: plaintext) and
	// Proof the ext_proc stream proof, as `swarmgate serve` sets them from
	// config.Security (TLS-cost measurements).
	Creds credentials.TransportCredentials
	Proof extproc.StreamProof
}

// NewTarget is a gRPC server with the named ext_proc implementation
// registered, and a cleanup to call after the server stopped. Both targets
// get the gRPC options `swarmgate serve` uses (package gateway); the
// swarmgate target is wired as there too: data-path metrics on a real
// registry and the access log as the config sets it (written to a JSON
// handler on io.Discard: formatting is measured, the terminal is not).
func NewTarget(kind string, o TargetOptions) (*grpc.Server, func(), error) {
	cfg, err := BenchConfig(o.RenameModel, o.RedisAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("loadgen: bench config: %w", err)
	}
	gopts := extproc.GRPCServerOptions()
	if kind == TargetBaselinePlain {
		n := int(cfg.Request.MaxBodyBytes) + 1<<20
		gopts = []grpc.ServerOption{grpc.MaxRecvMsgSize(n), grpc.MaxSendMsgSize(n)}
	}
	gopts = append(gopts,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	if o.StreamWorkers > 0 {
		gopts = append(gopts, grpc.NumStreamWorkers(o.StreamWorkers))
	}
	if o.Creds != nil {
		gopts = append(gopts, grpc.Creds(o.Creds))
	}
	gs := grpc.NewServer(gopts...)
	switch kind {
	case TargetBaseline, TargetBaselinePlain:
		(&baseline.Server{}).Register(gs)
		return gs, func() {}, nil
	case TargetSwarmgate:
	default:
		return nil, nil, fmt.Errorf("loadgen: unknown target %q (want %s, %s or %s)", kind, TargetBaseline, TargetBaselinePlain, TargetSwarmgate)
	}
	reg := telemetry.NewRegistry("bench")
	pools, err := keypool.New(cfg, keypool.Options{Registerer: reg})
	if err != nil {
		return nil, nil, fmt.Errorf("loadgen: key pools: %w", err)
	}
	opts := extproc.Options{Config: cfg, Logger: o.Logger, Registerer: reg, Keys: wire.Keys(pools), Usage: wire.Usage(),
		Metrics:   telemetry.NewMetrics(reg, cfg),
		AccessLog: telemetry.NewAccessLog(slog.New(slog.NewJSONHandler(io.Discard, nil)), cfg.Telemetry), Proof: o.Proof}
	cleanup := func() {}
	if o.RedisAddr != "" {
		rdb, err := redisconn.New(cfg.Redis)
		if err != nil {
			return nil, nil, fmt.Errorf("loadgen: redis: %w", err)
		}
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			return nil, nil, fmt.Errorf("loadgen: redis ping: %w", err)
		}
		l := ledger.New(rdb, ledger.OptionsFrom(cfg))
		runCtx, stop := context.WithCancel(context.Background())
		go l.Run(runCtx) // replays what a Redis hiccup buffered, as in gateway
		opts.Ledger = wire.Ledger(l, func() *config.Config { return cfg })
		cleanup = func() {
			stop()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = l.Close(ctx)
			_ = rdb.Close()
		}
	}
	srv, err := extproc.New(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("loadgen: extproc: %w", err)
	}
	srv.Register(gs)
	return gs, cleanup, nil
}
