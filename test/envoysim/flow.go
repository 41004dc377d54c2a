package envoysim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// exchange holds one downstream request while it passes the filter chain.
type exchange struct {
	s      *Sim
	w      http.ResponseWriter
	rec    Record
	req    headers
	body   []byte
	router *filterRun
	// clearRoute is set when the router filter asked for clear_route_cache
	// with a header mutation in the same response.
	clearRoute bool
}

// localReply is a response Envoy generates itself.
type localReply struct {
	status int
	header headers
	body   []byte
	// fromFilter marks an ImmediateResponse: the filter that sent it does
	// not see it again on the response path.
	fromFilter bool
}

func textReply(status int, msg string) *localReply {
	return &localReply{status: status, header: headers{{"content-type", "text/plain"}}, body: []byte(msg)}
}

// ServeHTTP runs one request through listener → router ext_proc → router →
// cluster (upstream ext_proc per attempt) → back.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{s: s, w: w, req: fromHTTP(r)}
	// Envoy generates x-request-id when the request has none
	// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/headers#x-request-id).
	if x.req.get("x-request-id") == "" {
		x.req.set("x-request-id", newRequestID())
	}
	x.rec.RequestID = x.req.get("x-request-id")
	defer func() { s.record(x.rec) }()

	// The route is chosen from the request headers before any filter runs;
	// only clear_route_cache makes the router pick it again
	// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/service/ext_proc/v3/external_processor.proto#envoy-v3-api-field-service-ext-proc-v3-commonresponse-clear-route-cache).
	route := s.match(x.req)

	ctx := r.Context()
	if lr := x.requestPath(ctx, r); lr != nil {
		x.respondLocal(ctx, lr)
		return
	}
	if x.clearRoute {
		route = s.match(x.req)
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
	cluster := route.Cluster
	if route.ClusterHeader != "" {
		cluster = x.req.get(route.ClusterHeader)
	}
	x.rec.Cluster = cluster
	s.mu.Lock()
	cl := s.clusters[cluster]
	s.mu.Unlock()
	if cl == nil {
		// cluster_not_found: 503 (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter).
		x.respondLocal(ctx, textReply(http.StatusServiceUnavailable, "cluster not found"))
		return
	}
	res := s.route(ctx, x, route, cl)
	if res.local != nil {
		x.respondLocal(ctx, res.local)
		return
	}
	x.respondUpstream(ctx, res)
}

func (s *Sim) match(h headers) *Route {
	path := h.get(":path")
	for i := range s.cfg.Routes {
		r := &s.cfg.Routes[i]
		if r.PathPrefix != "" && !strings.HasPrefix(path, r.PathPrefix) {
			continue
		}
		ok := true
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

// requestPath runs the router-level filter's request phases. It returns a
// local reply when the request ends here.
func (x *exchange) requestPath(ctx context.Context, r *http.Request) *localReply {
	f := x.s.cfg.RouterFilter
	limit := x.s.cfg.BufferLimit
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return textReply(http.StatusBadRequest, "downstream read error")
	}
	x.body = body
	if f == nil {
		if len(body) > limit {
			return textReply(http.StatusRequestEntityTooLarge, "Payload Too Large")
		}
		return nil
	}
	run, err := x.s.openFilter(ctx, f)
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
		if ov := resp.GetModeOverride(); ov != nil && f.AllowModeOverride {
			run.mode = ov
		}
	}
	if len(body) == 0 || run.off {
		return nil
	}
	switch run.mode.GetRequestBodyMode() {
	case extprocfilter.ProcessingMode_BUFFERED:
		// A BUFFERED body above the buffer limit fails the request with 413
		// (processing_mode.proto, BodySendMode BUFFERED).
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
		if len(body) > limit {
			// Not buffered by the filter: the router streams it; the sim
			// keeps it whole and only refuses absurd sizes.
			return textReply(http.StatusRequestEntityTooLarge, "Payload Too Large")
		}
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
		return textReply(http.StatusInternalServerError, "ext_proc: content-length does not match the mutated body")
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
	if n := x.router.f.applyMutation(h, cr.GetHeaderMutation(), x.s.cfg.EnvoyHeaderPrefix); n > 0 {
		x.s.stats.rejectedMutations.Add(int64(n))
		if x.router.f.DisallowIsError {
			return textReply(http.StatusInternalServerError, "rejected header mutation")
		}
	}
	if body != nil {
		applyBody(body, cr.GetBodyMutation())
	}
	if cr.GetClearRouteCache() {
		x.clearRoute = true
	}
	return nil
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

// immediate turns an ImmediateResponse into a local reply
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/service/ext_proc/v3/external_processor.proto#envoy-v3-api-msg-service-ext-proc-v3-immediateresponse).
func immediate(ir *extprocv3.ImmediateResponse) *localReply {
	status := int(ir.GetStatus().GetCode())
	if status < 200 {
		status = http.StatusOK
	}
	lr := &localReply{status: status, body: ir.GetBody(), fromFilter: true}
	(&Filter{}).applyMutation(&lr.header, ir.GetHeaders(), "x-envoy")
	return lr
}

// filterFailed applies failure_mode_allow: continue without the filter, or
// fail the request (504 on message timeout, 500 otherwise).
func (x *exchange) filterFailed(err error) *localReply {
	if x.router != nil {
		x.router.close(true)
		x.router.off = true
	}
	if x.s.cfg.RouterFilter.FailureModeAllow && !errors.Is(err, errSpurious) {
		x.s.stats.failOpen.Add(1)
		return nil
	}
	if errors.Is(err, errMessageTimeout) {
		return textReply(http.StatusGatewayTimeout, "ext_proc message timeout")
	}
	return textReply(http.StatusInternalServerError, "ext_proc error: "+err.Error())
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
