// Package extproc is swarmgate's Envoy external processor
// (envoy.service.ext_proc.v3.ExternalProcessor). One gRPC service serves two
// filters, told apart by the gRPC metadata contract.GRPCRoleHeader:
//
//   - router level (once per request): authenticates the virtual key,
//     answers GET /v1/models, reads the request body once, chooses the pool,
//     admits the request (keys, budget, token reservation), writes routing
//     headers; on the response it reads usage from JSON or SSE, emits token
//     counts as dynamic metadata and writes the ledger;
//   - upstream level (once per attempt, retries included): picks an upstream
//     key for the backend Envoy chose, sets its credential, path and model,
//     and reports the attempt's outcome to the key pool.
//
// The two streams of one request may reach different replicas: everything
// the upstream filter needs travels in internal headers and attributes.
//
// The admission decisions are steps in extproc/admit, which knows nothing
// of Envoy; the Envoy messages are written by extproc/envoymsg. This
// package connects them: one handler per message, each a short sequence
// of steps (docs/extproc.md, Code layout).
package extproc

import (
	"errors"
	"fmt"
	"github.com/swarmgate/swarmgate/extproc/admit"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// Options are the server's collaborators. Config, Keys and Usage are
// required; a nil Reserver, Budgets, Ledger or Refusals disables that step.
type Options struct {
	Config     *config.Config
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Keys       KeyPicker
	Usage      UsageCodec
	Reserver   Reserver
	Budgets    BudgetChecker
	Ledger     Recorder
	Refusals   RefusalLog
	// Metrics (data-path families: requests, latency, TTFT, tokens, cost,
	// per-phase time) and AccessLog are optional; nil records nothing.
	Metrics   *telemetry.Metrics
	AccessLog *telemetry.AccessLog
	// Tracer, when set, traces each admitted request as a GenAI span
	// (telemetry.NewTracerProvider; nil: tracing off).
	Tracer trace.Tracer
	// Proof, when set, is checked on every stream before its first message
	// (both roles); nil trusts every caller (loopback-only deployments).
	Proof StreamProof
	// SettleTimeout bounds accounting writes after a client disconnect
	// (the stream's context is gone by then). Default 5 s.
	SettleTimeout time.Duration
	Now           func() time.Time
	// Queue, when set, holds requests refused only for capacity that
	// comes back soon (admission.max_wait > 0); nil refuses at once.
	Queue AdmissionQueue
	// Affinity, when set, routes a Responses request naming a
	// previous_response_id to the backend and key that created it; nil
	// refuses such requests (400 unsupported_parameter).
	Affinity ResponseAffinity
	// Authenticator resolves the virtual key a client presents; nil: the
	// config's keys only (subkey.Auth{}). The process passes
	// subkey.Auth{Store: ...} when subkeys.enabled.
	Authenticator admit.Authenticator
}

// Server implements the ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     atomic.Pointer[config.Config]
	opts    Options
	log     *slog.Logger
	metrics *metrics
	routers sync.Pool
	// upstreams pools upstream-level stream state with its answer.
	upstreams sync.Pool
	// hosts caches the parsed upstream host metadata by its attribute text:
	// there is one text per endpoint, and prototext parsing it on every
	// attempt was the largest single cost of the upstream filter.
	hosts envoymsg.HostCache
	// signerCache is the request-identity signer of the newest config seen.
	signerCache atomic.Pointer[signerFor]
	// clusters are the newest snapshot's cluster names (clusternames.go).
	clusters atomic.Pointer[clusterNames]
	// translations hands the router's request translations to the first
	// attempt on this replica (translatecache.go).
	translations translationCache
	// admit runs the admission steps (extproc/admit).
	admit *admit.Admitter
}

// New builds a server.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Config == nil:
		return nil, errors.New("extproc: Options.Config is required")
	case opts.Keys == nil:
		return nil, errors.New("extproc: Options.Keys is required")
	case opts.Usage == nil:
		return nil, errors.New("extproc: Options.Usage is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SettleTimeout == 0 {
		opts.SettleTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Authenticator == nil {
		opts.Authenticator = subkey.Auth{}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	s := &Server{opts: opts, log: opts.Logger, metrics: m}
	s.admit = &admit.Admitter{Keys: opts.Keys, Queue: opts.Queue, Budgets: opts.Budgets, Reserver: opts.Reserver, Owners: opts.Affinity,
		Log: opts.Logger, Failed: func(step string) { m.accountingErr.WithLabelValues(step).Inc() }}
	s.cfg.Store(opts.Config)
	s.routers.New = func() any { return &routerStream{} }
	s.upstreams.New = func() any { return &upstreamStream{} }
	return s, nil
}

// SetConfig swaps the config snapshot; streams already running keep the one
// they started with.
func (s *Server) SetConfig(c *config.Config) {
	if c != nil {
		s.cfg.Store(c)
	}
}

// Config is the current snapshot.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, s) }

// Process serves one ext_proc stream.
func (s *Server) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	role := contract.RoleRouter
	// ValueFromIncomingContext reads the one key without copying the whole
	// metadata map (FromIncomingContext cost ~6 us per stream under load).
	if v := metadata.ValueFromIncomingContext(st.Context(), contract.GRPCRoleHeader); len(v) > 0 {
		role = v[0]
	}
	// Before any message is read: a stream that cannot prove it comes from
	// the Envoy fleet never reaches key selection, whatever role it claims.
	if s.opts.Proof != nil {
		if err := s.opts.Proof.Check(st.Context(), role); err != nil {
			return err
		}
	}
	switch role {
	case contract.RoleUpstream:
		return s.serveUpstream(st)
	case contract.RoleRouter:
		if cfg := s.cfg.Load(); s.opts.Queue != nil && cfg.Admission.MaxWait.Duration > 0 {
			// The queue extends Envoy's message timer on this stream
			// while a request waits (queue.go); with queueing off a stream
			// costs nothing more.
			st = withTimerExtension(st, cfg)
		}
		return s.serveRouter(st)
	}
	return status.Errorf(codes.InvalidArgument, "unknown %s %q", contract.GRPCRoleHeader, role)
}

// streamEnded tells a normal end (Envoy half-closed or cancelled the stream)
// from a failure.
func streamEnded(err error) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	c := status.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}

// GRPCServerOptions are the gRPC server options the ext_proc listener needs:
// a buffered request body arrives in one message, and the injected-usage
// body goes back in one, so grpc-go's 4 MiB default message limit must be
// raised above the largest body; and the Codec, which encodes the token
// metadata without protobuf-go's reflection over maps.
//
// The limits are sized for the largest request.max_body_bytes any config
// may set, not the given config's: the server is built once, and a reload
// that raised max_body_bytes would otherwise have every body above the
// start-up value fail as ResourceExhausted while Envoy's buffer limit let it
// through. The value in force is enforced by ext_proc's own check (413),
// which follows reloads. grpc-go allocates each message as it arrives, not
// the limit up front, so a higher limit costs nothing for small bodies.
func GRPCServerOptions() []grpc.ServerOption {
	n := config.MaxBodyBytesCeiling + 1<<20 // headers, framing, the added stream_options
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(n), grpc.MaxSendMsgSize(n), grpc.ForceServerCodecV2(envoymsg.NewCodec())}
}
