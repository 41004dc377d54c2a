package envoysim

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"
)

// routeResult is the router's outcome: an upstream response to stream back,
// or a local reply.
type routeResult struct {
	local  *localReply
	resp   *http.Response
	header headers // response headers after the upstream filter
	cancel context.CancelFunc
}

// route runs the router filter: endpoint choice, per-attempt upstream
// filter, retries
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter).
func (s *Sim) route(ctx context.Context, x *exchange, route *Route, cl *Cluster) routeResult {
	ctx, cancel := context.WithTimeout(ctx, deadlineFor(route))
	rp := route.Retry
	if rp == nil {
		rp = &RetryPolicy{}
	}
	triedHosts := map[string]bool{}
	triedPrios := map[int]bool{}
	var last routeResult
	retryAfter := time.Duration(-1)
	for attempt := 1; attempt <= rp.NumRetries+1; attempt++ {
		if attempt > 1 {
			s.stats.retries.Add(1)
			wait := backoff(rp, attempt-1, s)
			if retryAfter >= 0 {
				wait = retryAfter
			}
			if err := sleepCtx(ctx, wait); err != nil {
				break
			}
		}
		ep, err := s.pick(cl, rp, triedHosts, triedPrios)
		if err != nil {
			cancel()
			return routeResult{local: textReply(http.StatusServiceUnavailable, "no healthy upstream")}
		}
		triedHosts[ep.Address] = true
		triedPrios[ep.Priority] = true
		res, retriable := s.try(ctx, x, route, cl, ep, attempt, rp)
		if last.cancel != nil {
			last.cancel()
		}
		last = res
		if !retriable || attempt == rp.NumRetries+1 {
			break
		}
		retryAfter = -1
		if res.resp != nil {
			if rp.RetryAfterBackoff {
				if secs, err := strconv.Atoi(res.resp.Header.Get("retry-after")); err == nil && secs >= 0 {
					retryAfter = min(time.Duration(secs)*time.Second, max(rp.RateLimitedMax, time.Millisecond))
				}
			}
			res.resp.Body.Close()
		}
	}
	if last.local == nil && last.resp == nil {
		last.local = textReply(http.StatusGatewayTimeout, "upstream request timeout")
	}
	prev := last.cancel
	last.cancel = func() {
		if prev != nil {
			prev()
		}
		cancel()
	}
	return last
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is Envoy's fully jittered exponential back-off: a random time in
// [0, base·2^(n-1)], capped at max (default 10×base)
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter#x-envoy-max-retries).
func backoff(rp *RetryPolicy, n int, s *Sim) time.Duration {
	base := rp.BackoffBase
	if base == 0 {
		base = 25 * time.Millisecond
	}
	maxB := rp.BackoffMax
	if maxB == 0 {
		maxB = 10 * base
	}
	d := base << (n - 1)
	if d > maxB || d <= 0 {
		d = maxB
	}
	s.mu.Lock()
	j := time.Duration(s.rng.Int64N(int64(d) + 1))
	s.mu.Unlock()
	return j
}

// pick chooses an endpoint: the lowest priority with a healthy host, minus
// priorities already tried when previous_priorities is on
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/http/http_connection_management#retry-plugin-configuration),
// then weighted random among its healthy hosts, skipping hosts already tried
// when previous_hosts is on (falling back to them when nothing else is left,
// as host_selection_retry_max_attempts does). Simplified: Envoy spreads load
// across priorities by health percentage with an overprovisioning factor of
// 1.4 and enters panic mode below 50 % healthy; the sim moves a whole
// priority only when it has no healthy host left.
func (s *Sim) pick(cl *Cluster, rp *RetryPolicy, triedHosts map[string]bool, triedPrios map[int]bool) (*Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prios := []int{}
	for _, e := range cl.Endpoints {
		if !e.Unhealthy && !slices.Contains(prios, e.Priority) {
			prios = append(prios, e.Priority)
		}
	}
	if len(prios) == 0 {
		return nil, errNoHealthy
	}
	slices.Sort(prios)
	prio := prios[0]
	if rp.PreviousPriorities {
		for _, p := range prios {
			if !triedPrios[p] {
				prio = p
				break
			}
		}
	}
	var cands, fallback []int
	for i, e := range cl.Endpoints {
		if e.Unhealthy || e.Priority != prio {
			continue
		}
		fallback = append(fallback, i)
		if !rp.PreviousHosts || !triedHosts[e.Address] {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		cands = fallback
	}
	total := 0
	for _, i := range cands {
		total += weight(cl.Endpoints[i])
	}
	n := s.rng.IntN(total)
	for _, i := range cands {
		n -= weight(cl.Endpoints[i])
		if n < 0 {
			ep := cl.Endpoints[i]
			return &ep, nil
		}
	}
	ep := cl.Endpoints[cands[0]]
	return &ep, nil
}

func weight(e Endpoint) int {
	if e.Weight <= 0 {
		return 1
	}
	return e.Weight
}

// try is one attempt. Each attempt starts from the request as the router
// filter left it; upstream-filter changes do not carry over to the next one.
func (s *Sim) try(ctx context.Context, x *exchange, route *Route, cl *Cluster, ep *Endpoint, attempt int, rp *RetryPolicy) (routeResult, bool) {
	h := x.req.clone()
	body := x.body
	at := Attempt{Endpoint: ep.Address, Priority: ep.Priority}
	defer func() { x.rec.Attempts = append(x.rec.Attempts, at) }()
	if route.AutoHostRewrite {
		host := ep.Hostname
		if host == "" {
			host = ep.Address
		}
		h.set(":authority", host)
	}
	var up *filterRun
	if f := cl.UpstreamFilter; f != nil {
		var lr *localReply
		up, lr = s.upstreamRequest(ctx, x, f, ep, attempt, &h, &body)
		if lr != nil {
			at.Err = "upstream filter failed"
			return routeResult{local: lr}, false
		}
	}
	tctx, tcancel := context.WithCancel(ctx)
	if rp.PerTryTimeout > 0 {
		tctx, tcancel = context.WithTimeout(ctx, rp.PerTryTimeout)
	}
	req, err := http.NewRequestWithContext(tctx, h.get(":method"), "http://"+ep.Address+h.get(":path"), bytes.NewReader(body))
	if err != nil {
		tcancel()
		up.close(true)
		return routeResult{local: textReply(http.StatusBadRequest, err.Error())}, false
	}
	for _, e := range h {
		if strings.HasPrefix(e.key, ":") || e.key == "content-length" || e.key == "transfer-encoding" || e.key == "connection" {
			continue
		}
		req.Header.Add(e.key, e.value)
	}
	req.Host = h.get(":authority")
	req.ContentLength = int64(len(body))
	at.Header, at.Path = req.Header.Clone(), h.get(":path")
	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		tcancel()
		up.close(true)
		at.Err = err.Error()
		connect := isConnectFailure(err)
		at.Err = map[bool]string{true: "connect-failure", false: "reset"}[connect] + ": " + err.Error()
		return routeResult{local: textReply(http.StatusServiceUnavailable,
				"upstream connect error or disconnect/reset before headers. reset reason: "+map[bool]string{true: "connection failure", false: "connection termination"}[connect])},
			retriableReset(rp, connect)
	}
	at.Status = resp.StatusCode
	rh := headers{{":status", strconv.Itoa(resp.StatusCode)}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh.add(strings.ToLower(k), v)
		}
	}
	if up != nil && !up.off && up.mode.GetResponseHeaderMode() != extprocfilter.ProcessingMode_SKIP {
		r, err := up.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh.proto(), EndOfStream: resp.ContentLength == 0}}}, "response_headers")
		if err == nil {
			if r.GetImmediateResponse() != nil {
				s.stats.ignoredImmediate.Add(1)
			} else if n := up.f.applyMutation(&rh, common(r).GetHeaderMutation(), s.cfg.EnvoyHeaderPrefix); n > 0 {
				s.stats.rejectedMutations.Add(int64(n))
			}
		} else if !up.f.FailureModeAllow {
			up.close(true)
			resp.Body.Close()
			tcancel()
			return routeResult{local: textReply(http.StatusInternalServerError, "upstream ext_proc error")}, false
		}
	}
	up.close(false)
	return routeResult{resp: resp, header: rh, cancel: tcancel}, retriableStatus(rp, resp.StatusCode) || retriableHeader(rp, rh)
}

// upstreamRequest runs the upstream filter's request phases for one attempt.
// ImmediateResponse and clear_route_cache are ignored there
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/ext_proc_filter).
func (s *Sim) upstreamRequest(ctx context.Context, x *exchange, f *Filter, ep *Endpoint, attempt int, h *headers, body *[]byte) (*filterRun, *localReply) {
	fail := func(run *filterRun, err error) (*filterRun, *localReply) {
		run.close(true)
		if f.FailureModeAllow {
			s.stats.failOpen.Add(1)
			run.off = true
			return run, nil
		}
		if errors.Is(err, errMessageTimeout) {
			return nil, textReply(http.StatusGatewayTimeout, "ext_proc message timeout")
		}
		return nil, textReply(http.StatusInternalServerError, "upstream ext_proc error")
	}
	run, err := s.openFilter(ctx, f)
	if err != nil {
		return fail(&filterRun{f: f}, err)
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: h.proto(), EndOfStream: len(*body) == 0}}}
	x.addAttributes(first, run, ep, attempt)
	resp, err := run.exchange(first, "request_headers")
	if err != nil {
		return fail(run, err)
	}
	if ov := resp.GetModeOverride(); ov != nil && f.AllowModeOverride {
		run.mode = ov
	}
	s.applyUpstream(run, resp, h, nil)
	if len(*body) > 0 && run.mode.GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED {
		resp, err := run.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: *body, EndOfStream: true}}}, "request_body")
		if err != nil {
			return fail(run, err)
		}
		mutated := *body
		s.applyUpstream(run, resp, h, &mutated)
		if lr := checkContentLength(*h, *body, mutated, run.mode); lr != nil {
			run.close(true)
			return nil, lr
		}
		*body = mutated
	}
	return run, nil
}

func (s *Sim) applyUpstream(run *filterRun, resp *extprocv3.ProcessingResponse, h *headers, body *[]byte) {
	if resp.GetImmediateResponse() != nil {
		s.stats.ignoredImmediate.Add(1)
		return
	}
	cr := common(resp)
	if cr.GetClearRouteCache() {
		s.stats.ignoredClearRouteCache.Add(1)
	}
	if n := run.f.applyMutation(h, cr.GetHeaderMutation(), s.cfg.EnvoyHeaderPrefix); n > 0 {
		s.stats.rejectedMutations.Add(int64(n))
	}
	if body != nil {
		applyBody(body, cr.GetBodyMutation())
	}
}

func isConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retriableReset: connect-failure and reset are both within 5xx and
// gateway-error (router_filter.html#x-envoy-retry-on).
func retriableReset(rp *RetryPolicy, connect bool) bool {
	for _, on := range rp.RetryOn {
		switch on {
		case "5xx", "gateway-error", "reset":
			return true
		case "connect-failure":
			if connect {
				return true
			}
		}
	}
	return false
}

// retriableHeader: "retriable-headers" retries a response carrying one of
// retriable_headers. The router sees the response headers after the
// upstream filters ran, so a header an upstream filter set counts.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-field-config-route-v3-retrypolicy-retriable-headers
func retriableHeader(rp *RetryPolicy, rh headers) bool {
	if !slices.Contains(rp.RetryOn, "retriable-headers") {
		return false
	}
	for _, name := range rp.RetriableHeaders {
		if rh.get(name) != "" {
			return true
		}
	}
	return false
}

func retriableStatus(rp *RetryPolicy, code int) bool {
	for _, on := range rp.RetryOn {
		switch on {
		case "5xx":
			if code >= 500 {
				return true
			}
		case "gateway-error":
			if code == 502 || code == 503 || code == 504 {
				return true
			}
		case "retriable-status-codes":
			if slices.Contains(rp.RetriableStatusCodes, code) {
				return true
			}
		}
	}
	return false
}

// attributes evaluates the request_attributes the sim knows
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/advanced/attributes).
// Envoy puts them under the filter name "envoy.filters.http.ext_proc"; a
// message-typed attribute (xds.upstream_host_metadata) arrives as its text
// format in a string value, numbers as number values.
func attributes(names []string, x *exchange, ep *Endpoint, attempt int) map[string]*structpb.Struct {
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, n := range names {
		switch n {
		case "xds.upstream_host_metadata":
			if ep == nil {
				continue
			}
			md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
			for ns, kv := range ep.Metadata {
				f := map[string]any{}
				for k, v := range kv {
					f[k] = v
				}
				s, _ := structpb.NewStruct(f)
				md.FilterMetadata[ns] = s
			}
			b, _ := prototext.MarshalOptions{}.Marshal(md)
			st.Fields[n] = structpb.NewStringValue(string(b))
		case "upstream.request_attempt_count":
			if attempt > 0 {
				st.Fields[n] = structpb.NewNumberValue(float64(attempt))
			}
		case "xds.cluster_name":
			st.Fields[n] = structpb.NewStringValue(x.rec.Cluster)
		case "request.path":
			st.Fields[n] = structpb.NewStringValue(x.req.get(":path"))
		case "request.id":
			st.Fields[n] = structpb.NewStringValue(x.req.get("x-request-id"))
		}
	}
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": st}
}
