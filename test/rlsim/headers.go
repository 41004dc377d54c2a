package rlsim

import (
	"net/http"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// addXRateLimit adds the DRAFT_VERSION_03 headers the way Envoy's
// XRateLimitHeaderUtils::populateHeaders does
// (source/extensions/filters/http/ratelimit/ratelimit_headers.cc): the
// status with a limit and the least remaining picks remaining and reset; the
// limit header is that status's limit followed by a quota policy
// "<limit>;w=<window seconds>" for every status with a limit. A descriptor's
// x_ratelimit_option overrides the filter-level setting.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ratelimit/v3/rate_limit.proto#envoy-v3-api-field-extensions-filters-http-ratelimit-v3-ratelimit-enable-x-ratelimit-headers
func addXRateLimit(h http.Header, ps []*policy, enabled bool, statuses []*rlspb.RateLimitResponse_DescriptorStatus) {
	on := func(i int) bool {
		if i >= len(ps) || ps[i].xrl == routev3.RateLimit_UNSPECIFIED {
			return enabled
		}
		return ps[i].xrl == routev3.RateLimit_DRAFT_VERSION_03
	}
	minIdx := -1
	for i, s := range statuses {
		if s.GetCurrentLimit() == nil {
			continue
		}
		if minIdx < 0 || s.GetLimitRemaining() < statuses[minIdx].GetLimitRemaining() {
			minIdx = i
		}
	}
	if minIdx < 0 || !on(minIdx) {
		return
	}
	var b strings.Builder
	min := statuses[minIdx]
	b.WriteString(strconv.FormatUint(uint64(min.GetCurrentLimit().GetRequestsPerUnit()), 10))
	for i, s := range statuses {
		if s.GetCurrentLimit() == nil || !on(i) {
			continue
		}
		w := window(s.GetCurrentLimit().GetUnit())
		if w == 0 {
			continue
		}
		b.WriteString(", ")
		b.WriteString(strconv.FormatUint(uint64(s.GetCurrentLimit().GetRequestsPerUnit()), 10))
		b.WriteString(";w=")
		b.WriteString(strconv.Itoa(w))
		if n := s.GetCurrentLimit().GetName(); n != "" {
			b.WriteString(`;name="` + n + `"`)
		}
	}
	h.Add("x-ratelimit-limit", b.String())
	h.Add("x-ratelimit-remaining", strconv.FormatUint(uint64(min.GetLimitRemaining()), 10))
	h.Add("x-ratelimit-reset", strconv.FormatInt(min.GetDurationUntilReset().GetSeconds(), 10))
}

func window(u rlspb.RateLimitResponse_RateLimit_Unit) int {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}
