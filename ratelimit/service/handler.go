package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// handler is the gRPC RateLimitService registered on our listener. It
// answers Unavailable until the library's service exists (first config
// loaded), maps the library's errors to Unavailable and records metrics.
// Envoy treats every non-OK gRPC status the same way: failure_mode_deny.
type handler struct {
	rlspb.UnimplementedRateLimitServiceServer
	svc  atomic.Pointer[rlspb.RateLimitServiceServer]
	gate sync.RWMutex // see xdsProvider.gate
	m    *metrics
	log  *slog.Logger
}

func (h *handler) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (resp *rlspb.RateLimitResponse, err error) {
	// The library re-panics on anything but its own error types, and
	// grpc-go does not recover handler panics: without this a library bug
	// would take down the whole swarmgate process.
	defer func() {
		if r := recover(); r != nil {
			h.m.requests.WithLabelValues(codeError).Inc()
			h.log.Error("ratelimit service: ShouldRateLimit panicked", "panic", fmt.Sprint(r), "domain", req.GetDomain())
			resp, err = nil, status.Error(codes.Internal, "rate-limit service: internal error")
		}
	}()
	p := h.svc.Load()
	if p == nil {
		h.m.requests.WithLabelValues(codeNotReady).Inc()
		return nil, status.Error(codes.Unavailable, "rate-limit service: no config loaded yet")
	}
	start := time.Now()
	applyQuotas(req.GetDescriptors())
	h.gate.RLock()
	resp, err = (*p).ShouldRateLimit(ctx, req)
	h.gate.RUnlock()
	h.m.duration.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		h.m.requests.WithLabelValues(codeError).Inc()
		return nil, status.Error(codes.Unavailable, "rate-limit service: "+err.Error())
	case resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT:
		h.m.requests.WithLabelValues(codeOverLimit).Inc()
	default:
		h.m.requests.WithLabelValues(codeOK).Inc()
	}
	return resp, nil
}
