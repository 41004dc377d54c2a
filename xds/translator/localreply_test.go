package translator

import (
	"slices"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// TestLocalRepliesSpareAdmittedRequests: every mapper is gated on "not
// admitted" (Envoy reruns the mappers on ext_proc's own ImmediateResponse,
// so an ungated one rewrites the gateway's answers), and each kind of reply
// comes in Anthropic's shape under /v1/messages before OpenAI's.
func TestLocalRepliesSpareAdmittedRequests(t *testing.T) {
	lr := LocalReplies(1 << 20)
	if err := Validate(lr); err != nil {
		t.Fatal(err)
	}
	half := len(lr.Mappers) / 2
	if half == 0 || len(lr.Mappers) != 2*half {
		t.Fatalf("%d mappers, want an Anthropic and an OpenAI one per kind", len(lr.Mappers))
	}
	for i, m := range lr.Mappers {
		parts := m.GetFilter().GetAndFilter().GetFilters()
		md := parts[0].GetMetadataFilter()
		if md == nil || md.GetMatcher().GetFilter() != contract.MetadataNamespace ||
			md.GetMatcher().GetPath()[0].GetKey() != contract.MetaTenant ||
			md.GetMatcher().GetValue().GetNullMatch() == nil || !md.GetMatchIfKeyNotFound().GetValue() {
			t.Errorf("mapper %d is not gated on a missing tenant: %v", i, m.GetFilter())
		}
		body := m.GetBodyFormatOverride().GetJsonFormat().AsMap()
		anthropic := i < half
		if got := hasAnthropicPath(parts); got != anthropic {
			t.Errorf("mapper %d: /v1/messages filter %v, want %v", i, got, anthropic)
		}
		if anthropic {
			e, _ := body["error"].(map[string]any)
			if typ, _ := e["type"].(string); body["type"] != "error" || typ == "" || m.GetStatusCode().GetValue() == 0 {
				t.Errorf("mapper %d: not Anthropic's shape and status: %v %v", i, body, m.GetStatusCode())
			}
			continue
		}
		e, _ := body["error"].(map[string]any)
		if body["type"] != nil || e["code"] == nil || e["type"] == nil || m.GetStatusCode() != nil {
			t.Errorf("mapper %d: not OpenAI's shape: %v", i, body)
		}
		if msg, _ := e["message"].(string); strings.TrimSpace(msg) == "" {
			t.Errorf("mapper %d: no message", i)
		}
	}
}

func hasAnthropicPath(fs []*accesslogv3.AccessLogFilter) bool {
	return slices.ContainsFunc(fs, func(f *accesslogv3.AccessLogFilter) bool {
		h := f.GetHeaderFilter().GetHeader()
		return h.GetName() == ":path" && h.GetStringMatch().GetPrefix() == AnthropicPathPrefix
	})
}

// TestRoutesNeedAdmission: every pool route requires the tenant ext_proc
// writes at admission, the catch-all is a route entry (so the virtual
// host's buffer limit applies) that finds no cluster, and the virtual host
// keeps client addresses and Envoy's headers from providers.
func TestRoutesNeedAdmission(t *testing.T) {
	for _, name := range []string{"default.yaml", "mixed.yaml"} {
		t.Run(name, func(t *testing.T) {
			r, err := Translate(loadTestdata(t, name))
			if err != nil {
				t.Fatal(err)
			}
			vh := r.Routes[0].GetVirtualHosts()[0]
			for _, h := range []string{"x-forwarded-for", "x-envoy-external-address", "x-envoy-original-host", "x-envoy-expected-rq-timeout-ms"} {
				if !slices.Contains(vh.GetRequestHeadersToRemove(), h) {
					t.Errorf("virtual host keeps %s", h)
				}
			}
			routes := vh.GetRoutes()
			for _, rt := range routes[:len(routes)-1] {
				md := rt.GetMatch().GetDynamicMetadata()
				if len(md) != 1 || md[0].GetFilter() != contract.MetadataNamespace || md[0].GetPath()[0].GetKey() != contract.MetaTenant ||
					!md[0].GetValue().GetPresentMatch() {
					t.Errorf("route %s does not require admission: %v", rt.GetName(), md)
				}
			}
			last := routes[len(routes)-1]
			if last.GetName() != NoRouteName || last.GetRoute().GetClusterHeader() != NoRouteHeader || last.GetDirectResponse() != nil {
				t.Errorf("catch-all %v", last)
			}
			for _, c := range r.Clusters[len(r.IR.Pools):] {
				if got := c.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue(); got != ServiceMaxRequests {
					t.Errorf("service cluster %s: max_requests %d", c.GetName(), got)
				}
			}
		})
	}
}
