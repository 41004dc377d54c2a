// Package keylimit keeps each upstream API key under its provider's RPM and
// TPM by asking the shared rate-limit service, so every ext_proc replica
// counts against the same Redis window. It implements keypool.KeyLimiter
// and is called on the per-attempt (upstream ext_proc) path.
package keylimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// DefaultTimeout bounds one check. The rate-limit service answers in well
// under a millisecond on loopback (docs/ratelimit.md); the bound only
// matters when it or Redis is unreachable.
const DefaultTimeout = 50 * time.Millisecond

// Options are the optional dependencies of a Limiter.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are created, not registered
	Timeout    time.Duration         // per check; DefaultTimeout when zero
}

// Limiter checks [key=<id>, limit=rpm] (one hit) and [key=<id>, limit=tpm]
// (hits_addend = tokens) in one ShouldRateLimit call. Safe for concurrent
// use; it holds no connection of its own.
type Limiter struct {
	client  rlspb.RateLimitServiceClient
	timeout time.Duration
	log     *slog.Logger
	m       *metrics
	state   atomic.Pointer[state]
}

type state struct {
	domain   string
	failOpen bool
	keys     map[string]keyLimits
}

// keyLimits holds the prebuilt descriptor entries of one key, so a check
// allocates only the request.
type keyLimits struct {
	rpm, tpm                  []*rlcommon.RateLimitDescriptor_Entry
	allowed, limited, errored prometheus.Counter
}

// New returns a Limiter calling the rate-limit service over cc (dial
// config.Envoy.RateLimitAddress once and share the connection).
func New(cc grpc.ClientConnInterface, cfg *config.Config, opts Options) *Limiter {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	l := &Limiter{
		client:  rlspb.NewRateLimitServiceClient(cc),
		timeout: opts.Timeout,
		log:     opts.Logger,
		m:       newMetrics(opts.Registerer),
	}
	l.Update(cfg)
	return l
}

// Update switches to a new config (key set, limits, failure mode, domain).
func (l *Limiter) Update(cfg *config.Config) {
	st := &state{
		domain:   cfg.Envoy.RateLimitDomain,
		failOpen: cfg.FailureModes.RateLimit != config.FailClosed,
		keys:     make(map[string]keyLimits),
	}
	for i := range cfg.Backends {
		for _, k := range cfg.Backends[i].Keys {
			var kl keyLimits
			if k.RPM > 0 {
				kl.rpm = entries(k.ID, contract.LimitRPM)
			}
			if k.TPM > 0 {
				kl.tpm = entries(k.ID, contract.LimitTPM)
			}
			if kl.rpm != nil || kl.tpm != nil {
				kl.allowed = l.m.checks.WithLabelValues(k.ID, resultAllowed)
				kl.limited = l.m.checks.WithLabelValues(k.ID, resultLimited)
				kl.errored = l.m.checks.WithLabelValues(k.ID, resultError)
				st.keys[k.ID] = kl
			}
		}
	}
	l.state.Store(st)
}

// check is one ShouldRateLimit request with room for both descriptors.
type check struct {
	req   rlspb.RateLimitRequest
	ptrs  [2]*rlcommon.RateLimitDescriptor
	descs [2]rlcommon.RateLimitDescriptor
	hits  wrapperspb.UInt64Value
}

func entries(keyID, kind string) []*rlcommon.RateLimitDescriptor_Entry {
	return []*rlcommon.RateLimitDescriptor_Entry{
		{Key: contract.DescKey, Value: keyID},
		{Key: contract.DescLimit, Value: kind},
	}
}

// Allow charges one request and tokens against the key's windows and says
// whether the key may be used now. When it may not, retryAfter is when its
// fullest window resets. A key without RPM/TPM limits is allowed without a
// call. When the service cannot answer within the timeout, err is non-nil
// and ok is the configured failure mode (failure_modes.ratelimit), so a
// caller with its own fallback can use err and one without can use ok.
//
// A refused check's request still counts in the window that refused it;
// its tokens are given back (the service's chargeCache), so one attempt
// larger than the key's TPM does not shut the key for the minute.
func (l *Limiter) Allow(ctx context.Context, keyID string, tokens int) (ok bool, retryAfter time.Duration, err error) {
	st := l.state.Load()
	kl, limited := st.keys[keyID]
	if !limited {
		return true, 0, nil
	}
	c := new(check) // the request and its descriptors in one allocation
	c.req.Domain = st.domain
	c.req.Descriptors = c.ptrs[:0]
	if kl.rpm != nil {
		c.descs[0].Entries = kl.rpm
		c.req.Descriptors = append(c.req.Descriptors, &c.descs[0])
	}
	if kl.tpm != nil && tokens > 0 {
		c.hits.Value = uint64(tokens)
		c.descs[1].Entries = kl.tpm
		c.descs[1].HitsAddend = &c.hits
		c.req.Descriptors = append(c.req.Descriptors, &c.descs[1])
	}
	if len(c.req.Descriptors) == 0 {
		return true, 0, nil
	}

	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	start := time.Now()
	resp, err := l.client.ShouldRateLimit(ctx, &c.req)
	l.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		kl.errored.Inc()
		if errors.Is(ctx.Err(), context.Canceled) {
			return false, 0, fmt.Errorf("keylimit %s: %w", keyID, err)
		}
		return st.failOpen, 0, fmt.Errorf("keylimit %s: rate-limit service: %w", keyID, err)
	}
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		kl.allowed.Inc()
		return true, 0, nil
	}
	kl.limited.Inc()
	for _, s := range resp.GetStatuses() {
		if s.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			retryAfter = max(retryAfter, s.GetDurationUntilReset().AsDuration())
		}
	}
	return false, retryAfter, nil
}

// Dial opens the one client connection a process needs to the rate-limit
// service at config.Envoy.RateLimitAddress: plaintext unless opts carry
// transport credentials (internal/trust.DialCredentials). It connects
// lazily; close it at shutdown.
func Dial(cfg *config.Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	// opts come last: their transport credentials (TLS to the rate-limit
	// service) replace the plaintext default.
	cc, err := grpc.NewClient(cfg.Envoy.RateLimitAddress, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("keylimit: rate-limit service %s: %w", cfg.Envoy.RateLimitAddress, err)
	}
	return cc, nil
}
