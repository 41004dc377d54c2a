package service

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// chargeCache gives the two kinds of call Envoy makes their own charging
// rule. At request time (refusable) a call that one descriptor refuses
// charges only that one (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), so
// refused retries do not spend the other windows. The stream-end call
// (apply_on_stream_done) charges tokens already used; nothing is refused
// by it, so every descriptor takes its top-up (chargeAll), including when
// one of them crosses its limit. With the library's rule there, a sub-key
// whose window fills through a crossing top-up left that completion out of
// its tenant's, model's and minter's windows.
type chargeCache struct {
	refusable, chargeAll limiter.RateLimitCache
}

func (c *chargeCache) DoLimit(ctx context.Context, req *rlspb.RateLimitRequest, limits []*config.RateLimit) []*rlspb.RateLimitResponse_DescriptorStatus {
	if isTopUp(req) {
		return c.chargeAll.DoLimit(ctx, req, limits)
	}
	return c.refusable.DoLimit(ctx, req, limits)
}

func (c *chargeCache) Flush() {
	c.refusable.Flush()
	c.chargeAll.Flush()
}

// isTopUp reports whether req is Envoy's stream-end call: every descriptor
// is a token descriptor ([..., limit=tpm], the quota entry already
// removed by applyQuotas). The control plane makes only the tpm
// descriptors apply_on_stream_done, and every request-time call carries
// [tenant, limit=rpm], which needs nothing but the tenant every other
// descriptor comes with (xds/translator TestStreamDoneCallShape). Envoy
// builds the descriptors from its route config, never from the client.
// A request-time call taken for a top-up would only be charged as the
// library does by default, never admitted where it would be refused; one
// descriptor alone is charged the same way by both rules.
func isTopUp(req *rlspb.RateLimitRequest) bool {
	ds := req.GetDescriptors()
	for _, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return false
		}
		if last := es[len(es)-1]; last.GetKey() != contract.DescLimit || last.GetValue() != contract.LimitTPM {
			return false
		}
	}
	return len(ds) > 0
}
