package service

import (
	"context"
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
	svc atomic.Pointer[rlspb.RateLimitServiceServer]
	m   *metrics
}

func (h *handler) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	p := h.svc.Load()
	if p == nil {
		h.m.requests.WithLabelValues(codeNotReady).Inc()
		return nil, status.Error(codes.Unavailable, "rate-limit service: no config loaded yet")
	}
	start := time.Now()
	resp, err := (*p).ShouldRateLimit(ctx, req)
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
