package envoysim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// routeResult is the router's outcome: an upstream response to stream back,
// or a local reply.
type routeResult struct {
	local  *localReply
	resp   *http.Response
	header headers // response headers after the upstream filter
	cancel context.CancelFunc
	// upstreamReply: the local reply came from an upstream filter; the
	// router does not retry it.
	upstreamReply bool
}

// route runs the router filter: host choice, per-attempt upstream filter,
// retries (source/common/router/router.cc, v1.38.0).
func (s *Sim) route(ctx context.Context, x *exchange, route *Route, cl *Cluster) routeResult {
	x.routeTimeout = deadlineFor(route)
	ctx, cancel := context.WithTimeout(ctx, x.routeTimeout)
	rp := route.Retry
	if rp == nil {
		rp = &RetryPolicy{}
	}
	res := s.resourcesFor(cl.Name)
	res.active.Add(1)
	defer res.active.Add(-1)
	rs := newRetryState(s, rp, cl, res)
	defer rs.release()
	if rs.enabled() && len(x.body) > x.limit {
		// router.cc Filter::decodeData: the body does not fit the retry
		// buffer, so retries are given up (retry_or_shadow_abandoned) and
		// the request is streamed once.
		s.stats.retryAbandoned.Add(1)
		rs = nil
	}
	var attempted []*Endpoint
	var last routeResult
	finish := func(r routeResult) routeResult {
		prev := r.cancel
		r.cancel = func() {
			if prev != nil {
				prev()
			}
			cancel()
		}
		return r
	}
	for attempt := 1; ; attempt++ {
		ep := s.chooseHost(cl, rp, attempted, attempt > 1)
		if ep == nil {
			// router.cc Filter::sendNoHealthyUpstreamResponse (flag UH).
			s.stats.noHealthy.Add(1)
			x.setFlag(flagNoHealthyUpstream)
			if last.cancel != nil {
				last.cancel()
			}
			cancel()
			return routeResult{local: textReply(http.StatusServiceUnavailable, "no healthy upstream")}
		}
		attempted = append(attempted, ep)
		if attempt > 1 {
			s.stats.retries.Add(1)
		}
		r, decision := s.try(ctx, x, route, cl, ep, attempt, rs)
		if last.cancel != nil {
			last.cancel()
		}
		last = r
		if r.upstreamReply || decision == noRetry || rs == nil {
			return finish(r)
		}
		status, wait := rs.shouldRetry(decision, r.header)
		switch status {
		case retryLimitExceeded:
			x.setFlag(flagRetryLimit)
		case retryOverflow:
			x.setFlag(flagOverflow)
		}
		if status != retryYes {
			// The response (or local reply) of the last attempt goes to
			// the client.
			return finish(r)
		}
		if r.resp != nil {
			// A complete response leaves its connection in the pool.
			_, _ = io.CopyN(io.Discard, r.resp.Body, 64<<10)
			r.resp.Body.Close()
		}
		if err := sleepCtx(ctx, wait); err != nil {
			cancel()
			x.setFlag(flagUpstreamTimeout)
			return routeResult{local: textReply(http.StatusGatewayTimeout, "upstream request timeout")}
		}
	}
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

// try is one attempt, on the request's one header map (x.req) and a copy
// of the buffered body.
func (s *Sim) try(ctx context.Context, x *exchange, route *Route, cl *Cluster, ep *Endpoint, attempt int, rs *retryState) (routeResult, retryDecision) {
	start := time.Now()
	body := bytes.Clone(x.body)
	at := Attempt{Endpoint: ep.Address, Priority: ep.Priority}
	defer func() { x.rec.Attempts = append(x.rec.Attempts, at) }()
	// upstream_request.cc UpstreamRequest::onPoolReady (v1.38.0): only a
	// host with a hostname rewrites, into the router's header map, and the
	// old value goes to x-envoy-original-host (router suppress_envoy_headers
	// is false). onPoolReady runs inside conn_pool->newStream when a
	// connection is idle (warm), i.e. before the upstream filters see the
	// headers; on a new connection (cold) it runs once the connection is up,
	// after them. Both seen on 1.38.3 and 1.40.0 (TestModelAgainstEnvoy, "one
	// header map per request": attempt 1 on a fresh upstream, attempt 2
	// on its kept-alive connection).
	rewrite := func() {
		if !route.AutoHostRewrite || ep.Hostname == "" {
			return
		}
		if old := x.req.get(":authority"); old != "" && !s.cfg.SuppressEnvoyHeaders {
			x.req.set(s.cfg.EnvoyHeaderPrefix+"-original-host", old)
		}
		x.req.set(":authority", ep.Hostname)
	}
	x.expectedTimeout(ctx, attempt, rs)
	if attempt == 1 {
		for _, k := range route.RequestHeadersToRemove {
			x.req.del(k)
		}
	}
	warm := s.takeIdle(ep.Address)
	if warm {
		rewrite()
	}
	var up *filterRun
	if f := cl.UpstreamFilter; f != nil {
		var lr *localReply
		up, lr = s.upstreamRequest(ctx, x, f, ep, attempt, &body)
		if lr != nil {
			at.Err = "upstream filter local reply"
			x.rec.UpstreamLocalReply = true
			s.stats.immediateUpstream.Add(1)
			return routeResult{local: lr, upstreamReply: true}, noRetry
		}
	}
	if !warm {
		rewrite()
	}
	tctx, tcancel := context.WithCancel(ctx)
	if rs != nil && rs.rp.PerTryTimeout > 0 {
		tctx, tcancel = context.WithTimeout(ctx, rs.rp.PerTryTimeout)
	}
	h := x.req
	req, err := http.NewRequestWithContext(tctx, h.get(":method"), "http://"+ep.Address+h.get(":path"), bytes.NewReader(body))
	if err != nil {
		tcancel()
		up.close(true)
		return routeResult{local: textReply(http.StatusBadRequest, err.Error())}, noRetry
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
		connect := isConnectFailure(err)
		reason := map[bool]string{true: "remote connection failure", false: "connection termination"}[connect]
		x.setFlag(map[bool]string{true: flagConnectFailure, false: flagConnTermination}[connect])
		at.Err = map[bool]string{true: "connect-failure", false: "reset"}[connect] + ": " + err.Error()
		lr := textReply(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: "+reason)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// Per-try timeout: a local reset, retried as a reset
			// (router.cc Filter::onPerTryTimeoutCommon); the last one
			// answers 504.
			at.Err = "per-try timeout"
			lr = textReply(http.StatusGatewayTimeout, "upstream request timeout")
			connect = false
			delete(x.flags, flagConnTermination)
			x.setFlag(flagUpstreamTimeout)
		}
		if ctx.Err() != nil {
			x.setFlag(flagUpstreamTimeout)
			return routeResult{local: textReply(http.StatusGatewayTimeout, "upstream request timeout")}, noRetry
		}
		return routeResult{local: lr}, rs.fromReset(connect)
	}
	at.Status = resp.StatusCode
	resp.Body = &idleOnEOF{ReadCloser: resp.Body, done: func() { s.putIdle(ep.Address) }}
	rh := headers{{":status", strconv.Itoa(resp.StatusCode)}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh.add(strings.ToLower(k), v)
		}
	}
	// Go keeps transfer-encoding out of Header; Envoy's response map has it.
	if len(resp.TransferEncoding) > 0 {
		rh.add("transfer-encoding", strings.Join(resp.TransferEncoding, ", "))
	}
	if up != nil && !up.off && up.mode.GetResponseHeaderMode() != extprocfilter.ProcessingMode_SKIP {
		r, err := up.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh.proto(), EndOfStream: resp.ContentLength == 0}}}, "response_headers")
		var lr *localReply
		switch {
		case err != nil:
			lr = filterError(s, up.f, err, false)
			if lr == nil {
				up.off = true
			}
		case r.GetImmediateResponse() != nil:
			lr = immediate(r.GetImmediateResponse())
			lr.fromFilter = false
		default:
			n, merr := up.f.applyMutation(&rh, common(r).GetHeaderMutation(), s.cfg.EnvoyHeaderPrefix)
			s.stats.rejectedMutations.Add(int64(n))
			if merr != nil {
				lr = filterError(s, up.f, merr, false)
			}
		}
		if lr != nil {
			// An upstream filter's local reply goes to the client through
			// the downstream filter manager and is not retried
			// (upstream_request.cc UpstreamFilterManager::sendLocalReply,
			// v1.36.0 on; v1.35.0 ignored it:
			// send_immediate_resp_upstream_ignored). The response headers
			// have not reached the downstream filters yet.
			up.close(true)
			resp.Body.Close()
			tcancel()
			x.rec.UpstreamLocalReply = true
			s.stats.immediateUpstream.Add(1)
			return routeResult{local: lr, upstreamReply: true}, noRetry
		}
	}
	up.close(false)
	// router.cc Filter::onUpstreamHeaders: the time the attempt took, after
	// the upstream filters ran on the response headers.
	if !s.cfg.SuppressEnvoyHeaders {
		rh.set(s.cfg.EnvoyHeaderPrefix+"-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	}
	return routeResult{resp: resp, header: rh, cancel: tcancel}, rs.fromHeaders(rh)
}

// upstreamRequest runs the upstream filter's request phases for one attempt
// on the router's header map. clear_route_cache is ignored there
// (processor_state.cc clearRouteCache: clear_route_cache_upstream_ignored).
// An ImmediateResponse, an error or a timeout without failure_mode_allow, or
// an invalid mutation, is a local reply to the client (v1.36.0 on, see try).
func (s *Sim) upstreamRequest(ctx context.Context, x *exchange, f *Filter, ep *Endpoint, attempt int, body *[]byte) (*filterRun, *localReply) {
	h := &x.req
	fail := func(run *filterRun, err error) (*filterRun, *localReply) {
		run.close(true)
		if lr := filterError(s, f, err, false); lr != nil {
			return nil, lr
		}
		run.off = true
		return run, nil
	}
	run, err := s.openFilter(ctx, f, x.md)
	if err != nil {
		return fail(&filterRun{f: f}, err)
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: h.proto(), EndOfStream: len(*body) == 0}}}
	x.addAttributes(first, run, ep, attempt)
	if run.mode.GetRequestHeaderMode() != extprocfilter.ProcessingMode_SKIP {
		resp, err := run.exchange(first, "request_headers")
		if err != nil {
			return fail(run, err)
		}
		if lr, err := s.applyUpstream(run, resp, h, nil); lr != nil || err != nil {
			if err != nil {
				return fail(run, err)
			}
			run.close(false)
			return nil, lr
		}
	}
	if len(*body) > 0 && !run.off && run.mode.GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED {
		resp, err := run.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: *body, EndOfStream: true}}}, "request_body")
		if err != nil {
			return fail(run, err)
		}
		mutated := *body
		if lr, err := s.applyUpstream(run, resp, h, &mutated); lr != nil || err != nil {
			if err != nil {
				return fail(run, err)
			}
			run.close(false)
			return nil, lr
		}
		if lr := checkContentLength(*h, *body, mutated, run.mode); lr != nil {
			lr.fromFilter = false
			run.close(true)
			return nil, lr
		}
		*body = mutated
	}
	return run, nil
}

func (s *Sim) applyUpstream(run *filterRun, resp *extprocv3.ProcessingResponse, h *headers, body *[]byte) (*localReply, error) {
	if ir := resp.GetImmediateResponse(); ir != nil {
		lr := immediate(ir)
		lr.fromFilter = false
		return lr, nil
	}
	cr := common(resp)
	if cr.GetClearRouteCache() {
		s.stats.ignoredClearRouteCache.Add(1)
	}
	n, err := run.f.applyMutation(h, cr.GetHeaderMutation(), s.cfg.EnvoyHeaderPrefix)
	s.stats.rejectedMutations.Add(int64(n))
	if err != nil {
		return nil, err
	}
	if body != nil {
		applyBody(body, cr.GetBodyMutation())
	}
	return nil, nil
}

// expectedTimeout is router.cc FilterUtility::setTimeoutHeaders (v1.38.0),
// run for every attempt on the router's header map before the upstream
// filters: x-envoy-expected-rq-timeout-ms is what is left of the route
// timeout, or the per-try timeout when that is shorter.
func (x *exchange) expectedTimeout(ctx context.Context, attempt int, rs *retryState) {
	dl, ok := ctx.Deadline()
	if !ok || x.s.cfg.SuppressEnvoyHeaders {
		return
	}
	left := time.Until(dl)
	if attempt == 1 {
		left = x.routeTimeout
	}
	if rs != nil && rs.rp.PerTryTimeout > 0 && rs.rp.PerTryTimeout < left {
		left = rs.rp.PerTryTimeout
	}
	if ms := left.Milliseconds(); ms > 0 {
		x.req.set(x.s.cfg.EnvoyHeaderPrefix+"-expected-rq-timeout-ms", strconv.FormatInt(ms, 10))
	}
}

// idleOnEOF marks the attempt's connection idle again once its response
// body was read to the end.
type idleOnEOF struct {
	io.ReadCloser
	done func()
	once sync.Once
}

func (r *idleOnEOF) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		r.once.Do(r.done)
	}
	return n, err
}

func isConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// attributes evaluates the request_attributes the sim knows
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/advanced/attributes).
// Envoy puts them under the filter name "envoy.filters.http.ext_proc"; a
// message-typed attribute (xds.upstream_host_metadata) arrives as its text
// format in a string value (hostMetadataText), numbers as number values;
// upstream.request_attempt_count is the router's attempt count
// (context.cc UpstreamRequestAttemptCount, a uint64, v1.38.0).
func attributes(names []string, x *exchange, ep *Endpoint, attempt int) map[string]*structpb.Struct {
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, n := range names {
		switch n {
		case "xds.upstream_host_metadata":
			if ep == nil {
				continue
			}
			md := map[string]*structpb.Struct{}
			for ns, kv := range ep.Metadata {
				f := map[string]any{}
				for k, v := range kv {
					f[k] = v
				}
				md[ns], _ = structpb.NewStruct(f)
			}
			st.Fields[n] = structpb.NewStringValue(hostMetadataText(md))
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
