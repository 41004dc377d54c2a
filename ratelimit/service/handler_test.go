package service

import (
	"context"
	"log/slog"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type panicking struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (panicking) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	panic("library bug")
}

func TestHandlerSurvivesLibraryPanic(t *testing.T) {
	h := &handler{m: newMetrics(nil), log: slog.New(slog.DiscardHandler)}
	var svc rlspb.RateLimitServiceServer = panicking{}
	h.svc.Store(&svc)
	_, err := h.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d"})
	if status.Code(err) != codes.Internal {
		t.Errorf("err %v, want Internal", err)
	}
}
