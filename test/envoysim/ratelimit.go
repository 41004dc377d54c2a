package envoysim

import (
	"context"
	"strings"

	"github.com/swarmgate/swarmgate/test/rlsim"
)

// rateLimitState is the rate-limit filter's per-request state
// (source/extensions/filters/http/ratelimit/ratelimit.cc, v1.38.0).
type rateLimitState struct {
	// decoded: decodeHeaders ran (request_headers_ is set), so onDestroy
	// makes the stream-done call. A request answered before the filter (an
	// ImmediateResponse of the router-level ext_proc) never gets one.
	decoded bool
	// routed: a route entry and its cluster existed at decodeHeaders; the
	// filter keeps them for onDestroy (populateRateLimitDescriptors), and
	// without them there are no descriptors at all.
	routed bool
	// respHeaders are added to whatever response passes the filter's
	// encodeHeaders (x-ratelimit-*, the service's response_headers_to_add).
	respHeaders map[string][]string
}

// rateLimitRequest is Filter::decodeHeaders. It runs after the router-level
// ext_proc finished its request phases (that filter holds the headers until
// its BUFFERED body answer), on the header map and dynamic metadata as they
// are then, with the route re-selected if that filter cleared it. OVER_LIMIT
// (enforced) answers 429 with x-envoy-ratelimited and the x-ratelimit-*
// headers; an error answers status_on_error only with failure_mode_deny.
func (x *exchange) rateLimitRequest(ctx context.Context, route *Route, cl *Cluster) *localReply {
	f := x.s.cfg.RateLimit
	if f == nil {
		return nil
	}
	x.rl.decoded = true
	x.rl.routed = route != nil && route.DirectStatus == 0 && cl != nil
	if !x.rl.routed {
		return nil
	}
	res := f.DecodeHeaders(ctx, x.rlRequest())
	if !res.Called {
		return nil
	}
	x.recordRateLimit(false, res)
	switch {
	case res.Err != nil:
		x.s.stats.rlError.Add(1)
		if res.LocalReply {
			x.setFlag(flagRateLimitError)
		}
		if res.FailureModeAllowed {
			x.s.stats.rlFailOpen.Add(1)
		}
	case res.LocalReply:
		x.s.stats.rlOverLimit.Add(1)
		x.setFlag(flagRateLimited)
	}
	if res.LocalReply {
		lr := &localReply{status: res.Status, body: res.Body}
		for k, vs := range res.Headers {
			for _, v := range vs {
				lr.header.add(strings.ToLower(k), v)
			}
		}
		return lr
	}
	for k, vs := range res.RequestHeadersToAdd {
		for _, v := range vs {
			x.req.add(strings.ToLower(k), v)
		}
	}
	x.rl.respHeaders = res.Headers
	return nil
}

// rateLimitStreamDone is Filter::onDestroy: when decodeHeaders ran and its
// call is not pending, the apply_on_stream_done descriptors are built from
// the request header map as it is at the end of the stream — after every
// attempt's upstream filter changed it — and the final dynamic metadata,
// and sent; the answer changes nothing. It fires for local replies too (a
// 429 of this filter, an upstream filter's ImmediateResponse, no healthy
// upstream).
func (x *exchange) rateLimitStreamDone(ctx context.Context) {
	f := x.s.cfg.RateLimit
	if f == nil || !x.rl.decoded || !x.rl.routed {
		return
	}
	res := f.OnStreamDone(context.WithoutCancel(ctx), x.rlRequest())
	if res.Called {
		x.recordRateLimit(true, res)
	}
}

func (x *exchange) rlRequest() *rlsim.Request {
	return &rlsim.Request{Headers: x.req.http(), DynamicMetadata: x.md.snapshot()}
}

func (x *exchange) recordRateLimit(done bool, res rlsim.Result) {
	c := RateLimitCall{StreamDone: done, Request: res.Request, Response: res.Response}
	if res.Err != nil {
		c.Err = res.Err.Error()
	}
	x.rec.RateLimitCalls = append(x.rec.RateLimitCalls, c)
}

// addRateLimitHeaders is the filter's encodeHeaders
// (populateResponseHeaders): its headers go on every response that passes
// it on the way out, before the router-level ext_proc sees the response.
func (x *exchange) addRateLimitHeaders(h *headers) {
	for k, vs := range x.rl.respHeaders {
		k = strings.ToLower(k)
		h.del(k)
		for _, v := range vs {
			h.add(k, v)
		}
	}
}
