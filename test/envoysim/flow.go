package envoysim

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// exchange holds one downstream request while it passes the filter chain.
type exchange struct {
	s   *Sim
	w   http.ResponseWriter
	rec Record
	// req is THE request header map of this request: the router-level
	// filter, the rate-limit filter and every attempt's upstream filter
	// read and change this one map.
	req    headers
	body   []byte
	md     *dynMetadata
	router *filterRun
	// clearRoute is set when the router filter's answer cleared the route
	// cache (processor_state.cc DecodingProcessorState::clearRouteCache).
	clearRoute bool
	// flags are the stream's response flags (localreply.go).
	flags map[string]bool
	// emptyLocal: the response is a local reply without a body.
	emptyLocal bool
	// limit is the stream's buffer limit (Config.RouteBufferLimit).
	limit int
	// routeTimeout is the chosen route's timeout.
	routeTimeout time.Duration
	// rl is the rate-limit filter's state for this request.
	rl rateLimitState
}

// localReply is a response Envoy generates itself.
type localReply struct {
	status int
	header headers
	body   []byte
	// fromFilter marks an ImmediateResponse (or error reply) of the
	// router-level ext_proc: that filter's processing is complete, so it
	// does not see the reply on the encode path (ext_proc.cc
	// Filter::encodeHeaders skips when processing_complete_, v1.38.0).
	fromFilter bool
}

// textReply is a local reply; a body makes it text/plain
// (http/utility.cc Utility::prepareLocalReply).
func textReply(status int, msg string) *localReply {
	if msg == "" {
		return &localReply{status: status}
	}
	return &localReply{status: status, header: headers{{"content-type", "text/plain"}}, body: []byte(msg)}
}

// ServeHTTP runs one request through listener → router ext_proc →
// ratelimit → router → cluster (upstream ext_proc per attempt) → back.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{s: s, w: w, req: fromHTTP(r), md: &dynMetadata{}}
	x.rec.ClientRequestID = x.req.get("x-request-id")
	x.requestID(r.RemoteAddr)
	x.rec.RequestID = x.req.get("x-request-id")
	defer x.destroy(r.Context())

	// The route is chosen from the request headers before any filter runs;
	// only a cleared route cache makes the router pick it again.
	route := s.match(x.req, x.md)

	ctx := r.Context()
	x.limit = s.cfg.BufferLimit
	if route != nil && route.DirectStatus == 0 && s.cfg.RouteBufferLimit > x.limit {
		x.limit = s.cfg.RouteBufferLimit
	}
	if lr := x.requestPath(ctx, r); lr != nil {
		x.respondLocal(ctx, lr)
		return
	}
	if x.clearRoute {
		route = s.match(x.req, x.md)
		// refreshBufferLimit again: a route entry may only raise it.
		if route != nil && route.DirectStatus == 0 && s.cfg.RouteBufferLimit > x.limit {
			x.limit = s.cfg.RouteBufferLimit
		}
	}
	var cl *Cluster
	cluster := ""
	if route != nil && route.DirectStatus == 0 {
		cluster = route.Cluster
		if route.ClusterHeader != "" {
			cluster = x.req.get(route.ClusterHeader)
		}
		s.mu.Lock()
		cl = s.clusters[cluster]
		s.mu.Unlock()
	}
	if lr := x.rateLimitRequest(ctx, route, cl); lr != nil {
		x.respondLocal(ctx, lr)
		return
	}
	if route == nil {
		x.respondLocal(ctx, textReply(http.StatusNotFound, ""))
		return
	}
	x.rec.Route = route.Name
	if route.DirectStatus != 0 {
		lr := &localReply{status: route.DirectStatus, body: []byte(route.DirectBody)}
		for k, v := range route.ResponseHeaders {
			lr.header.set(k, v)
		}
		x.respondLocal(ctx, lr)
		return
	}
	x.rec.Cluster = cluster
	if cl == nil {
		// cluster_not_found: cluster_not_found_response_code, 503 by
		// default, without a body (router.cc Filter::decodeHeaders,
		// v1.38.0; TestModelAgainstEnvoy "cluster not found").
		code := route.ClusterNotFoundStatus
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		x.setFlag(flagNoCluster)
		x.respondLocal(ctx, &localReply{status: code})
		return
	}
	res := s.route(ctx, x, route, cl)
	if res.local != nil {
		x.respondLocal(ctx, res.local)
		return
	}
	x.respondUpstream(ctx, res)
}

// requestID is the HCM's ConnectionManagerUtility::mutateRequestHeaders
// (conn_manager_utility.cc, v1.38.0): with use_remote_address the peer's
// address is appended to x-forwarded-for, x-forwarded-proto is overwritten
// from the connection and x-envoy-external-address set (every request is
// external); without it x-forwarded-proto is only added when absent; an
// edge request gets a new x-request-id, any request without one gets one
// (request_id/uuid/config.cc UUIDRequestIDExtension::set).
func (x *exchange) requestID(remote string) {
	edge := x.s.cfg.UseRemoteAddress
	if edge {
		ip, _, _ := net.SplitHostPort(remote)
		if xff := x.req.get("x-forwarded-for"); xff != "" {
			x.req.set("x-forwarded-for", xff+","+ip)
		} else {
			x.req.add("x-forwarded-for", ip)
		}
		x.req.set("x-forwarded-proto", "http")
		defer x.req.set(x.s.cfg.EnvoyHeaderPrefix+"-external-address", ip)
	} else if !x.req.has("x-forwarded-proto") {
		x.req.add("x-forwarded-proto", "http")
	}
	if x.req.get("x-request-id") == "" || (edge && !x.s.cfg.PreserveExternalRequestID) {
		x.req.set("x-request-id", newUUID())
	}
}

func (x *exchange) setFlag(f string) {
	if x.flags == nil {
		x.flags = map[string]bool{}
	}
	x.flags[f] = true
}

// destroy is the end of the stream: the rate-limit filter's onDestroy call,
// then the record.
func (x *exchange) destroy(ctx context.Context) {
	x.rateLimitStreamDone(ctx)
	x.rec.RequestHeader = x.req.http()
	x.rec.DynamicMetadata = x.md.plain()
	x.s.record(x.rec)
}

func (s *Sim) match(h headers, md *dynMetadata) *Route {
	path := h.get(":path")
	for i := range s.cfg.Routes {
		r := &s.cfg.Routes[i]
		if r.PathPrefix != "" && !strings.HasPrefix(path, r.PathPrefix) {
			continue
		}
		ok := md.has(r.MetadataPresent)
		for k, v := range r.Headers {
			if !h.has(k) || h.get(k) != v {
				ok = false
				break
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// maxBody bounds what the sim reads of a request body it does not buffer
// for a filter; Envoy streams such bodies, the sim needs them whole.
const maxBody = 256 << 20

// requestPath runs the router-level filter's request phases. It returns a
// local reply when the request ends here.
//
// Buffer limits (v1.38.0): a BUFFERED ext_proc body above the stream's
// buffer limit is a 413 from the filter manager (ext_proc.cc
// Filter::onData returns StopIterationAndBuffer); a body nobody buffers is
// streamed, and above the limit it only stops the router from keeping a
// retry copy (router.cc Filter::decodeData: retries are given up,
// retry_or_shadow_abandoned).
func (x *exchange) requestPath(ctx context.Context, r *http.Request) *localReply {
	f := x.s.cfg.RouterFilter
	limit := x.limit
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return textReply(http.StatusBadRequest, "downstream read error")
	}
	if len(body) > maxBody {
		return textReply(http.StatusRequestEntityTooLarge, "envoysim: body above what the sim models")
	}
	x.body = body
	if f == nil {
		return nil
	}
	run, err := x.s.openFilter(ctx, f, x.md)
	if err != nil {
		return x.filterFailed(err)
	}
	x.router = run
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: x.req.proto(), EndOfStream: len(body) == 0}}}
	x.addAttributes(first, run, nil, 0)
	if run.mode.GetRequestHeaderMode() != extprocfilter.ProcessingMode_SKIP {
		resp, err := run.exchange(first, "request_headers")
		if err != nil {
			return x.filterFailed(err)
		}
		if lr := x.applyRouter(resp, &x.req, nil); lr != nil {
			return lr
		}
	}
	if len(body) == 0 || run.off {
		return nil
	}
	switch run.mode.GetRequestBodyMode() {
	case extprocfilter.ProcessingMode_BUFFERED:
		if len(body) > limit {
			return textReply(http.StatusRequestEntityTooLarge, "Payload Too Large")
		}
		req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}
		resp, err := run.exchange(req, "request_body")
		if err != nil {
			return x.filterFailed(err)
		}
		mutated := x.body
		if lr := x.applyRouter(resp, &x.req, &mutated); lr != nil {
			return lr
		}
		if lr := checkContentLength(x.req, x.body, mutated, run.mode); lr != nil {
			return lr
		}
		x.body = mutated
	case extprocfilter.ProcessingMode_NONE:
	default:
		return textReply(http.StatusInternalServerError, "envoysim: request body mode not modelled")
	}
	return nil
}

// checkContentLength models the rule that with BUFFERED body mode and SEND
// header mode the processor must keep content-length right, else the
// mutation is rejected with a local reply (processing_mode.proto,
// BodySendMode). With other modes Envoy removes content-length.
func checkContentLength(h headers, before, after []byte, mode *extprocfilter.ProcessingMode) *localReply {
	if string(before) == string(after) || !h.has("content-length") {
		return nil
	}
	if h.get("content-length") != strconv.Itoa(len(after)) {
		// The filter's own error reply: empty, and (at router level) not
		// seen by the filter's encode path (1.38.3 and 1.40.0,
		// TestModelAgainstEnvoy "BUFFERED mutated body with stale
		// content-length").
		return &localReply{status: http.StatusInternalServerError, fromFilter: true}
	}
	return nil
}

// applyRouter applies a router-level answer to request headers (and body).
func (x *exchange) applyRouter(resp *extprocv3.ProcessingResponse, h *headers, body *[]byte) *localReply {
	if ir := resp.GetImmediateResponse(); ir != nil {
		return immediate(ir)
	}
	cr := common(resp)
	if cr == nil {
		return nil
	}
	n, err := x.router.f.applyMutation(h, cr.GetHeaderMutation(), x.s.cfg.EnvoyHeaderPrefix)
	x.s.stats.rejectedMutations.Add(int64(n))
	if err != nil {
		return x.filterFailed(err)
	}
	if body != nil {
		applyBody(body, cr.GetBodyMutation())
	}
	x.clearRouteCache(cr)
	return nil
}

// clearRouteCache is DecodingProcessorState::clearRouteCache
// (processor_state.cc, v1.38.0) for the downstream filter: only an answer
// that carries a header_mutation (even an empty one) can clear the route;
// DEFAULT clears when clear_route_cache is set, CLEAR always, RETAIN never.
func (x *exchange) clearRouteCache(cr *extprocv3.CommonResponse) {
	if cr.GetHeaderMutation() == nil {
		if cr.GetClearRouteCache() {
			x.s.stats.clearRouteIgnored.Add(1)
		}
		return
	}
	switch x.router.f.RouteCacheAction {
	case "CLEAR":
		x.clearRoute = true
	case "RETAIN":
	default:
		if cr.GetClearRouteCache() {
			x.clearRoute = true
		}
	}
}

func applyBody(body *[]byte, m *extprocv3.BodyMutation) {
	if m == nil {
		return
	}
	switch v := m.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		*body = v.Body
	case *extprocv3.BodyMutation_ClearBody:
		if v.ClearBody {
			*body = nil
		}
	}
}

// immediate turns an ImmediateResponse into a local reply (ext_proc.cc
// Filter::sendImmediateResponse, v1.38.0): no status or one below 200
// means 200; its header mutation is applied with the filter's rules.
func immediate(ir *extprocv3.ImmediateResponse) *localReply {
	status := int(ir.GetStatus().GetCode())
	if status < 200 {
		status = http.StatusOK
	}
	lr := &localReply{status: status, body: ir.GetBody(), fromFilter: true}
	_, _ = (&Filter{}).applyMutation(&lr.header, ir.GetHeaders(), "x-envoy")
	return lr
}

// filterFailed is the router-level filter's error handling (ext_proc.cc,
// v1.38.0): with failure_mode_allow a timeout (onMessageTimeout), a gRPC
// error (onGrpcError) or a spurious message (onReceiveMessage) makes the
// filter ignore the server for the rest of the request; without it they
// answer 504 (timeout) or status_on_error (500). An invalid mutation always
// answers status_on_error (handleErrorResponse), failure_mode_allow or not.
func (x *exchange) filterFailed(err error) *localReply {
	f := x.s.cfg.RouterFilter
	if x.router != nil {
		x.router.close(true)
		x.router.off = true
	}
	return filterError(x.s, f, err, true)
}

// filterError returns the local reply for a filter error, or nil when the
// filter fails open.
func filterError(s *Sim, f *Filter, err error, fromFilter bool) *localReply {
	if f.FailureModeAllow && !errors.Is(err, errMutation) {
		s.stats.failOpen.Add(1)
		return nil
	}
	var lr *localReply
	if errors.Is(err, errMessageTimeout) {
		lr = textReply(http.StatusGatewayTimeout, "")
	} else {
		lr = textReply(f.statusOnError(), "")
	}
	lr.fromFilter = fromFilter
	return lr
}

func (f *Filter) statusOnError() int {
	if f.StatusOnError >= 200 {
		return f.StatusOnError
	}
	return http.StatusInternalServerError
}

// addAttributes sends request_attributes with the first message of a stream
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto#envoy-v3-api-field-extensions-filters-http-ext-proc-v3-externalprocessor-request-attributes),
// under the filter's name, as CEL values: messages printed as text format.
func (x *exchange) addAttributes(req *extprocv3.ProcessingRequest, run *filterRun, ep *Endpoint, attempt int) {
	if run.firstSent || len(run.f.RequestAttributes) == 0 {
		run.firstSent = true
		return
	}
	run.firstSent = true
	req.Attributes = attributes(run.f.RequestAttributes, x, ep, attempt)
}

func deadlineFor(route *Route) time.Duration {
	if route.Timeout > 0 {
		return route.Timeout
	}
	// Route timeout default (route_components.proto RouteAction.timeout).
	return 15 * time.Second
}
