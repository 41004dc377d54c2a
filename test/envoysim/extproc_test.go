package envoysim

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Behaviour 5: ext_proc answers read as v1.38.0 reads them (ext_proc.cc
// onReceiveMessage, mutation_utils.cc applyHeaderMutations,
// processor_state.cc clearRouteCache), the edge x-request-id and the buffer
// limit.
func TestExtProcStrictness(t *testing.T) {
	headersOnly := func(cr *extprocv3.CommonResponse) script {
		return func(_ string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
			if req.GetRequestHeaders() != nil {
				return one(answerWith(req, cr))
			}
			return one(pass(req))
		}
	}
	modeOnly := func(_ string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
		if req.GetRequestHeaders() != nil {
			return one(&extprocv3.ProcessingResponse{ModeOverride: &extprocfilter.ProcessingMode{}})
		}
		return one(pass(req))
	}
	tests := []struct {
		name       string
		answer     script
		failOpen   bool
		cfg        func(*Config)
		reqHeader  map[string]string
		body       string
		wantStatus int
		check      func(t *testing.T, s *Sim, up *upstream)
	}{
		{name: "standalone mode_override is spurious: status_on_error", answer: modeOnly, wantStatus: 500},
		{name: "spurious with failure_mode_allow fails open", answer: modeOnly, failOpen: true, wantStatus: 200,
			check: func(t *testing.T, s *Sim, _ *upstream) {
				if s.Stats().SpuriousMessages != 1 || s.Stats().FailureModeAllowed != 1 {
					t.Errorf("stats %+v", s.Stats())
				}
			}},
		{name: "value is ignored, raw_value wins, append adds, append_action ignored",
			answer: headersOnly(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-value-only", Value: "v"}},
				{Header: &corev3.HeaderValue{Key: "x-both", Value: "v", RawValue: []byte("raw")}},
				{Header: &corev3.HeaderValue{Key: "x-multi", RawValue: []byte("2")}, Append: wrapperspb.Bool(true)},
				{Header: &corev3.HeaderValue{Key: "x-over", RawValue: []byte("new")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
			}}}),
			reqHeader: map[string]string{"x-multi": "1", "x-over": "old"}, wantStatus: 200,
			check: func(t *testing.T, _ *Sim, up *upstream) {
				h := up.reqs[0].Header
				if v, ok := h["X-Value-Only"]; !ok || v[0] != "" || h.Get("x-both") != "raw" ||
					strings.Join(h.Values("x-multi"), ",") != "1,2" || strings.Join(h.Values("x-over"), ",") != "new" {
					t.Errorf("upstream headers %v", h)
				}
			}},
		{name: "invalid header value fails the request even with failure_mode_allow", failOpen: true,
			answer:     headersOnly(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setRaw("x-bad", "a\nb")}}}),
			wantStatus: 500},
		{name: "clear_route_cache without a header mutation is ignored",
			answer: headersOnly(&extprocv3.CommonResponse{ClearRouteCache: true}),
			cfg: func(c *Config) {
				c.Routes[0].Headers = map[string]string{"x-never": "1"}
			}, wantStatus: 404,
			check: func(t *testing.T, s *Sim, _ *upstream) {
				if s.Stats().ClearRouteCacheIgnored != 1 {
					t.Errorf("stats %+v", s.Stats())
				}
			}},
		{name: "edge request gets a new x-request-id", answer: headersOnly(&extprocv3.CommonResponse{}),
			cfg: func(c *Config) { c.UseRemoteAddress = true }, reqHeader: map[string]string{"x-request-id": "client"}, wantStatus: 200,
			check: func(t *testing.T, _ *Sim, up *upstream) {
				if id := up.reqs[0].Header.Get("x-request-id"); id == "client" || len(id) != 36 {
					t.Errorf("x-request-id %q", id)
				}
			}},
		{name: "unbuffered body above the limit is streamed without retries",
			answer: headersOnly(&extprocv3.CommonResponse{}), body: strings.Repeat("x", 64),
			cfg: func(c *Config) {
				c.BufferLimit = 16
				c.RouterFilter.Mode.RequestBodyMode = extprocfilter.ProcessingMode_NONE
				c.Routes[0].Retry = &RetryPolicy{RetryOn: []string{"5xx"}, NumRetries: 1}
			}, wantStatus: 200,
			check: func(t *testing.T, s *Sim, _ *upstream) {
				if s.Stats().RetryOrShadowAbandoned != 1 {
					t.Errorf("stats %+v", s.Stats())
				}
			}},
		{name: "BUFFERED body above the limit is 413", answer: headersOnly(&extprocv3.CommonResponse{}), body: strings.Repeat("x", 64),
			cfg: func(c *Config) { c.BufferLimit = 16 }, wantStatus: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startScript(t, tc.answer)
			up := newUpstream(t, func(int) int { return 200 })
			rf := routerFilter(addr)
			rf.FailureModeAllow = tc.failOpen
			cfg := Config{Routes: []Route{{Name: "r", Cluster: "c"}}, RouterFilter: rf, Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: up.addr()}}}}}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s := startSim(t, cfg)
			body := tc.body
			if body == "" {
				body = "b"
			}
			resp, _ := do(t, s, tc.reqHeader, body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.check != nil {
				tc.check(t, s, up)
			}
		})
	}
}

// Behaviour 6: dynamic metadata per namespace, merged into the one stream
// info, forwarded to the upstream filter; attributes as 1.38 prints them.
func TestDynamicMetadataAndAttributes(t *testing.T) {
	p, addr := startScript(t, func(role string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
		resp := pass(req)
		switch {
		case role == "router" && req.GetRequestHeaders() != nil:
			resp.DynamicMetadata = structOf(t, map[string]any{"swarmgate": map[string]any{"tenant": "t1", "est": 10}, "other": map[string]any{"x": 1}})
		case role == "router" && req.GetRequestBody() != nil:
			resp.DynamicMetadata = structOf(t, map[string]any{"swarmgate": map[string]any{"est": 20}})
		case role == "upstream" && req.GetResponseHeaders() != nil:
			resp.DynamicMetadata = structOf(t, map[string]any{"swarmgate": map[string]any{"key": "k1"}})
		}
		return one(resp)
	})
	up := newUpstream(t, func(int) int { return 200 })
	rf := routerFilter(addr)
	rf.ReceivingNamespaces = []string{"swarmgate"}
	uf := upstreamFilter(addr, extprocfilter.ProcessingMode_NONE)
	uf.ForwardingNamespaces, uf.ReceivingNamespaces = []string{"swarmgate"}, []string{"swarmgate"}
	uf.RequestAttributes = []string{"xds.upstream_host_metadata", "upstream.request_attempt_count"}
	s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c"}}, RouterFilter: rf, Clusters: []Cluster{{Name: "c", UpstreamFilter: uf,
		Endpoints: []Endpoint{{Address: up.addr(), Metadata: map[string]map[string]string{"swarmgate": {"backend": "b1"}}}}}}})
	if resp, _ := do(t, s, map[string]string{"x-request-id": "md"}, "b"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	uh := p.seen("upstream", "request_headers")[0].req
	fwd := uh.GetMetadataContext().GetFilterMetadata()["swarmgate"].AsMap()
	if fwd["tenant"] != "t1" || fwd["est"] != 20.0 || len(uh.GetMetadataContext().GetFilterMetadata()) != 1 {
		t.Errorf("metadata_context %v", uh.GetMetadataContext())
	}
	if rh := p.seen("upstream", "response_headers")[0].req; rh.GetMetadataContext().GetFilterMetadata()["swarmgate"] == nil {
		t.Error("metadata_context missing on the response message")
	}
	attrs := uh.GetAttributes()["envoy.filters.http.ext_proc"].GetFields()
	wantText := `filter_metadata { key: "swarmgate" value { fields { key: "backend" value { string_value: "b1" } } } } `
	if attrs["xds.upstream_host_metadata"].GetStringValue() != wantText || attrs["upstream.request_attempt_count"].GetNumberValue() != 1 {
		t.Errorf("attributes %v", attrs)
	}
	rec := waitRecord(t, s, "md")
	got := rec.DynamicMetadata["swarmgate"]
	if got["tenant"] != "t1" || got["est"] != 20.0 || got["key"] != "k1" || rec.DynamicMetadata["other"] != nil {
		t.Errorf("stream metadata %v", rec.DynamicMetadata)
	}
}
