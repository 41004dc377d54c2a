package service

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"
	"github.com/envoyproxy/ratelimit/src/utils"

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
//
// At request time the library still adds a refusing descriptor's own
// hits_addend to its window: harmless for a request count, but a refused
// token estimate of thousands filled the window for everyone until it
// ended (a 12,000-token request refused by a 10,000 TPM left 12,000 in the
// window; the next 100-token request was refused too, and a key the pick
// tried was out for the minute on every replica). giveBack takes it back.
type chargeCache struct {
	refusable, chargeAll limiter.RateLimitCache
	keys                 limiter.CacheKeyGenerator
	// giveBack takes n back from the counter key (DECRBY).
	giveBack func(key string, n int64)
	now      func() int64 // unix seconds, the library's clock
}

func (c *chargeCache) DoLimit(ctx context.Context, req *rlspb.RateLimitRequest, limits []*config.RateLimit) []*rlspb.RateLimitResponse_DescriptorStatus {
	if isTopUp(req) {
		return c.chargeAll.DoLimit(ctx, req, limits)
	}
	before := c.now()
	st := c.refusable.DoLimit(ctx, req, limits)
	c.giveBackRefused(req, limits, st, before)
	return st
}

// giveBackRefused takes back the hits_addend (above 1: tokens) of every
// descriptor that refused the request, in the window the library charged:
// the one that held when the call began, unless a window ended during it
// (then the charged one is over anyway).
func (c *chargeCache) giveBackRefused(req *rlspb.RateLimitRequest, limits []*config.RateLimit, st []*rlspb.RateLimitResponse_DescriptorStatus, before int64) {
	var addends []uint64
	after := int64(-1)
	for i, s := range st {
		if s.GetCode() != rlspb.RateLimitResponse_OVER_LIMIT || i >= len(limits) || limits[i] == nil || limits[i].ShadowMode {
			continue
		}
		if addends == nil {
			addends = utils.GetHitsAddends(req)
		}
		if addends[i] <= 1 {
			continue
		}
		if after < 0 {
			after = c.now()
		}
		div := utils.UnitToDivider(limits[i].Limit.Unit)
		if before/div != after/div {
			continue
		}
		if key := c.keys.GenerateCacheKey(req.GetDomain(), req.GetDescriptors()[i], limits[i], before); key.Key != "" {
			c.giveBack(key.Key, int64(addends[i]))
		}
	}
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
