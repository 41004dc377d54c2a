// Package rlsim models Envoy's global HTTP rate-limit filter
// (envoy.filters.http.ratelimit) configured with filter-level rate_limits,
// as the control plane generates it, against a real rate-limit service over
// gRPC. No Envoy binary is installable here; this is the test double the
// ext_proc harness uses for that filter. Each modelled behaviour cites the
// Envoy page (or source file) it follows:
//
//   - descriptors and hits_addend, per filter-level rate_limits entry:
//     https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-msg-config-route-v3-ratelimit
//     and source/extensions/filters/common/ratelimit_config/ratelimit_config.cc
//     (an action that cannot produce its entry drops the whole descriptor;
//     an invalid hits_addend drops it too);
//   - composing actions, request_headers / generic_key / metadata:
//     https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/rate_limit_filter#composing-actions
//   - apply_on_stream_done: the second, fire-and-forget call when the
//     stream is destroyed, whose answer changes nothing for this request;
//   - failure_mode_deny, status_on_error (default 500), timeout (default
//     20 ms), rate_limited_status (default 429), x-envoy-ratelimited and
//     enable_x_ratelimit_headers (DRAFT_VERSION_03):
//     https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ratelimit/v3/rate_limit.proto
//     and source/extensions/filters/http/ratelimit/ratelimit.cc,
//     ratelimit_headers.cc.
//
// Envoy's rate-limit filter never adds Retry-After; clients get
// x-ratelimit-reset (seconds) when the headers are enabled.
//
// Not modelled (New rejects configs that need them): stage/disable_key
// (Envoy rejects them here too), limit overrides, route-entry metadata,
// generic_key format strings, hits_addend commands other than %REQ% and
// %DYNAMIC_METADATA%, is_negative_hits, request_type, runtime fractions,
// per-route RateLimitPerRoute.
package rlsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// DefaultTimeout is the filter's RPC timeout when the config sets none.
const DefaultTimeout = 20 * time.Millisecond

// Filter is one rate-limit filter instance (one Envoy, or one harness).
type Filter struct {
	domain         string
	policies       []policy
	client         rlspb.RateLimitServiceClient
	timeout        time.Duration // 0: none
	failureDeny    bool
	statusOnError  int
	limitedStatus  int
	xRateLimit     bool
	xEnvoyLimited  bool
	replyHeaderAdd http.Header
}

// New builds a Filter from the rate-limit filter's typed config.
func New(cfg *ratelimitv3.RateLimit, client rlspb.RateLimitServiceClient) (*Filter, error) {
	if cfg.GetDomain() == "" {
		return nil, errors.New("rlsim: domain is required")
	}
	if rt := cfg.GetRequestType(); rt != "" && rt != "both" {
		return nil, fmt.Errorf("rlsim: request_type %q is not modelled", rt)
	}
	if cfg.GetFailureModeDenyPercent() != nil || cfg.GetFilterEnabled() != nil || cfg.GetFilterEnforced() != nil {
		return nil, errors.New("rlsim: runtime fractions are not modelled")
	}
	f := &Filter{
		domain:        cfg.GetDomain(),
		client:        client,
		timeout:       DefaultTimeout,
		failureDeny:   cfg.GetFailureModeDeny(),
		statusOnError: http.StatusInternalServerError,
		limitedStatus: http.StatusTooManyRequests,
		xRateLimit:    cfg.GetEnableXRatelimitHeaders() == ratelimitv3.RateLimit_DRAFT_VERSION_03,
		xEnvoyLimited: !cfg.GetDisableXEnvoyRatelimitedHeader(),
	}
	if t := cfg.GetTimeout(); t != nil {
		f.timeout = t.AsDuration()
	}
	// status_on_error: a valid HTTP code (100..511), else 500.
	if c := int(cfg.GetStatusOnError().GetCode()); c >= 100 && c <= 511 {
		f.statusOnError = c
	}
	// rate_limited_status: below 400 means 429.
	if c := int(cfg.GetRateLimitedStatus().GetCode()); c >= 400 {
		f.limitedStatus = c
	}
	for _, h := range cfg.GetResponseHeadersToAdd() {
		if f.replyHeaderAdd == nil {
			f.replyHeaderAdd = http.Header{}
		}
		if err := addHeaderOption(f.replyHeaderAdd, h); err != nil {
			return nil, err
		}
	}
	for i, rl := range cfg.GetRateLimits() {
		p, err := newPolicy(rl)
		if err != nil {
			return nil, fmt.Errorf("rate_limits[%d]: %w", i, err)
		}
		f.policies = append(f.policies, p)
	}
	return f, nil
}

func addHeaderOption(h http.Header, o *corev3.HeaderValueOption) error {
	k, v := o.GetHeader().GetKey(), o.GetHeader().GetValue()
	if len(o.GetHeader().GetRawValue()) > 0 {
		v = string(o.GetHeader().GetRawValue())
	}
	for _, c := range v {
		if c == '%' {
			return fmt.Errorf("rlsim: response_headers_to_add %q uses a formatter, not modelled", k)
		}
	}
	if o.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
		h.Set(k, v)
	} else {
		h.Add(k, v)
	}
	return nil
}

// Result is what Envoy does with one rate-limit call.
type Result struct {
	// Called says a ShouldRateLimit call was made (there was at least one
	// descriptor). Request and Response are what went over the wire.
	Called   bool
	Request  *rlspb.RateLimitRequest
	Response *rlspb.RateLimitResponse
	// Err is the call's failure (timeout, Unavailable, ...).
	Err error
	// LocalReply: Envoy answers the client itself with Status, Headers and
	// Body; the request never reaches the router.
	LocalReply bool
	Status     int
	Body       []byte
	// Headers are the local reply's headers, or, when the request goes on,
	// the headers Envoy adds to the upstream response it returns.
	Headers http.Header
	// RequestHeadersToAdd are added to the request before it goes on.
	RequestHeadersToAdd http.Header
	// FailureModeAllowed: the call failed and the request goes on
	// (failure_mode_deny false; stat ratelimit.failure_mode_allowed).
	FailureModeAllowed bool
}

// Descriptors returns the descriptors Envoy sends for r: the request-time
// ones, or those with apply_on_stream_done when onStreamDone.
func (f *Filter) Descriptors(r *Request, onStreamDone bool) []*rlcommon.RateLimitDescriptor {
	ds, _ := f.descriptors(r, onStreamDone)
	return ds
}

func (f *Filter) descriptors(r *Request, onStreamDone bool) ([]*rlcommon.RateLimitDescriptor, []*policy) {
	var ds []*rlcommon.RateLimitDescriptor
	var ps []*policy
	for i := range f.policies {
		p := &f.policies[i]
		if p.onStreamDone != onStreamDone {
			continue
		}
		if d, ok := p.descriptor(r); ok {
			ds = append(ds, d)
			ps = append(ps, p)
		}
	}
	return ds, ps
}

func (f *Filter) call(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	return f.client.ShouldRateLimit(ctx, req)
}

// DecodeHeaders is the filter's request-time check (decodeHeaders).
func (f *Filter) DecodeHeaders(ctx context.Context, r *Request) Result {
	ds, ps := f.descriptors(r, false)
	if len(ds) == 0 {
		return Result{}
	}
	res := Result{Called: true, Request: &rlspb.RateLimitRequest{Domain: f.domain, Descriptors: ds}}
	resp, err := f.call(ctx, res.Request)
	if err != nil {
		res.Err = err
		if !f.failureDeny {
			res.FailureModeAllowed = true
			return res
		}
		// Local reply with status_on_error and nothing else.
		res.LocalReply, res.Status = true, f.statusOnError
		return res
	}
	res.Response = resp
	h := http.Header{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Add(hv.GetKey(), hv.GetValue())
	}
	over := resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT
	if over && f.xEnvoyLimited {
		h.Set("x-envoy-ratelimited", "true")
	}
	addXRateLimit(h, ps, f.xRateLimit, resp.GetStatuses())
	if !over { // OK and UNKNOWN both let the request through
		for _, hv := range resp.GetRequestHeadersToAdd() {
			if res.RequestHeadersToAdd == nil {
				res.RequestHeadersToAdd = http.Header{}
			}
			res.RequestHeadersToAdd.Add(hv.GetKey(), hv.GetValue())
		}
		if len(h) > 0 {
			res.Headers = h
		}
		return res
	}
	for k, vs := range f.replyHeaderAdd {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	res.LocalReply, res.Status, res.Headers, res.Body = true, f.limitedStatus, h, resp.GetRawBody()
	return res
}

// OnStreamDone is the call Envoy makes when the stream is destroyed, with
// the apply_on_stream_done descriptors. Envoy ignores its answer; it is
// returned here only so tests can look at it. Envoy makes it whether the
// request was answered by upstream or refused locally (not while its
// request-time call is still pending, which cannot happen here).
func (f *Filter) OnStreamDone(ctx context.Context, r *Request) Result {
	ds, _ := f.descriptors(r, true)
	if len(ds) == 0 {
		return Result{}
	}
	res := Result{Called: true, Request: &rlspb.RateLimitRequest{Domain: f.domain, Descriptors: ds}}
	res.Response, res.Err = f.call(ctx, res.Request)
	return res
}
