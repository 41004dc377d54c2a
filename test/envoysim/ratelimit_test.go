package envoysim

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"strconv"

	"github.com/swarmgate/swarmgate/test/rlsim"
)

func metaAction(key string) *routev3.RateLimit_Action {
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_Metadata{Metadata: &routev3.RateLimit_Action_MetaData{
		DescriptorKey: key, MetadataKey: &metadatav3.MetadataKey{Key: "swarmgate",
			Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}}}}}}
}

func headerAction(name string) *routev3.RateLimit_Action {
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
		RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: name}}}
}

// Behaviour 7: the rate-limit filter between the router-level ext_proc and
// the router (ratelimit.cc Filter::decodeHeaders and Filter::onDestroy,
// v1.38.0).
func TestRateLimitFilter(t *testing.T) {
	for _, over := range []bool{false, true} {
		name := map[bool]string{false: "OK: stream-done sees the final map and metadata", true: "OVER_LIMIT: 429 through the ext_proc encode path"}[over]
		t.Run(name, func(t *testing.T) {
			p, addr := startScript(t, func(role string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
				if role == "upstream" {
					if req.GetRequestHeaders() != nil {
						return one(answerWith(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"x-tenant"}}}))
					}
					return one(pass(req))
				}
				resp := pass(req)
				switch {
				case req.GetRequestBody() != nil:
					resp.DynamicMetadata = structOf(t, map[string]any{"swarmgate": map[string]any{"tenant": "t1"}})
				case req.GetResponseBody().GetEndOfStream():
					resp.DynamicMetadata = structOf(t, map[string]any{"swarmgate": map[string]any{"completion_tokens": 42}})
				}
				return one(resp)
			})
			rls := &scriptRLS{answer: func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
				if over {
					return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}
				}
				return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
			}}
			rl, err := rlsim.New(&ratelimitv3.RateLimit{Domain: "d", RateLimits: []*routev3.RateLimit{
				{Actions: []*routev3.RateLimit_Action{metaAction("tenant")}},
				{Actions: []*routev3.RateLimit_Action{metaAction("tenant")}, ApplyOnStreamDone: true,
					HitsAddend: &routev3.RateLimit_HitsAddend{Format: "%DYNAMIC_METADATA(swarmgate:completion_tokens)%"}},
				// Built on the final header map: the upstream filter removed it.
				{Actions: []*routev3.RateLimit_Action{headerAction("x-tenant")}, ApplyOnStreamDone: true},
			}}, startRLS(t, rls))
			if err != nil {
				t.Fatal(err)
			}
			rf := routerFilter(addr)
			rf.ReceivingNamespaces = []string{"swarmgate"}
			up := newUpstream(t, func(int) int { return 200 })
			s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c"}}, RouterFilter: rf, RateLimit: rl,
				Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: up.addr()}}, UpstreamFilter: upstreamFilter(addr, 0)}}})
			resp, _ := do(t, s, map[string]string{"x-tenant": "t1", "x-request-id": "rl"}, "b")
			rec := waitRecord(t, s, "rl")
			if len(rec.RateLimitCalls) != 2 || rec.RateLimitCalls[0].StreamDone || !rec.RateLimitCalls[1].StreamDone {
				t.Fatalf("calls %+v", rec.RateLimitCalls)
			}
			if got := d(rec.RateLimitCalls[0].Request.GetDescriptors()); got != "tenant=t1" {
				t.Errorf("request-time descriptors %q", got)
			}
			if over {
				if resp.StatusCode != 429 || resp.Header.Get("x-envoy-ratelimited") != "true" || len(up.body) != 0 {
					t.Errorf("status %d headers %v upstream %d", resp.StatusCode, resp.Header, len(up.body))
				}
				if rh := p.seen("router", "response_headers"); len(rh) != 1 {
					t.Errorf("router-level ext_proc saw %d response_headers", len(rh))
				}
				// No completion metadata without an upstream answer: the
				// hits_addend descriptor is dropped; x-tenant is still there.
				if got := d(rec.RateLimitCalls[1].Request.GetDescriptors()); got != "x-tenant=t1" {
					t.Errorf("stream-done descriptors %q", got)
				}
				return
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := d(rec.RateLimitCalls[1].Request.GetDescriptors()); got != "tenant=t1+42" {
				t.Errorf("stream-done descriptors %q (x-tenant was removed by the upstream filter)", got)
			}
		})
	}
}

// d renders descriptors as "k=v,k=v+hits;...".
func d(ds []*rlcommon.RateLimitDescriptor) string {
	out := ""
	for i, x := range ds {
		if i > 0 {
			out += ";"
		}
		for j, e := range x.GetEntries() {
			if j > 0 {
				out += ","
			}
			out += e.GetKey() + "=" + e.GetValue()
		}
		if h := x.GetHitsAddend(); h != nil {
			out += "+" + strconv.FormatUint(h.GetValue(), 10)
		}
	}
	return out
}
