package extproc_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// upstreamReq is the first message of a per-attempt stream as Envoy sends
// it: request_attributes with the chosen host's metadata as text format.
func upstreamReq(t testing.TB, backend, model string, attempt int, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	t.Helper()
	ns, _ := structpb.NewStruct(map[string]any{contract.EndpointBackend: backend, contract.EndpointUpstreamModel: model})
	md, _ := prototext.Marshal(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.MetadataNamespace: ns}})
	r := reqHeaders(eos, kv...)
	r.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		contract.AttrUpstreamHostMetadata: structpb.NewStringValue(string(md)),
		contract.AttrAttemptCount:         structpb.NewNumberValue(float64(attempt)),
	}}}
	return r
}

func internalHeaders(extra ...string) []string {
	return append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", "x-request-id", "req-9",
		contract.HeaderModel, "chat", contract.HeaderPool, "pool_chat", contract.HeaderTenant, "alpha", contract.HeaderEstTokens, "12",
		contract.HeaderSticky, "s-1", "content-length", "40"}, extra...)
}

func TestUpstreamSetsCredentialPathAndModel(t *testing.T) {
	h := newHarness(t, testConfig(t))
	tests := []struct {
		name, backend, model string
		credHeader, credVal  string
		path                 string
		rewrite              bool
	}{
		{"api-key backend with base path", "small", "chat", "api-key", "upstream-small-1", "/openai/v1/chat/completions", false},
		{"bearer backend with renamed model", "big", "vendor/chat-large", "authorization", "Bearer upstream-big-", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleUpstream)
			defer cancel()
			resp := roundTrip(t, st, upstreamReq(t, tc.backend, tc.model, 1, false, internalHeaders()...))
			m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
			set := setOf(t, m)
			if got := set[tc.credHeader]; len(got) < len(tc.credVal) || got[:len(tc.credVal)] != tc.credVal {
				t.Errorf("credential %s=%q", tc.credHeader, got)
			}
			if set[":path"] != tc.path {
				t.Errorf(":path %q want %q", set[":path"], tc.path)
			}
			for _, k := range []string{contract.HeaderModel, contract.HeaderPool, contract.HeaderTenant, contract.HeaderEstTokens, contract.HeaderSticky} {
				if !contains(m.GetRemoveHeaders(), k) {
					t.Errorf("%s not removed", k)
				}
			}
			if tc.backend == "small" && set["x-tenant-route"] != "blue" {
				t.Errorf("static header missing: %v", set)
			}
			ov := resp.GetModeOverride()
			if tc.rewrite != (ov.GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED) {
				t.Fatalf("mode override %v", ov)
			}
			if !tc.rewrite {
				return
			}
			r := roundTrip(t, st, reqBody(`{"model":"chat","messages":[]}`))
			cr := r.GetRequestBody().GetResponse()
			nb := string(cr.GetBodyMutation().GetBody())
			if nb != `{"model":"vendor/chat-large","messages":[]}` || setOf(t, cr.GetHeaderMutation())["content-length"] != "43" {
				t.Errorf("rewritten body %q headers %v", nb, cr.GetHeaderMutation())
			}
		})
	}
}

func TestUpstreamExcludesKeyAfter429(t *testing.T) {
	h := newHarness(t, testConfig(t))
	// Attempt 1 gets a key and a 429.
	st, cancel := h.stream(t, contract.RoleUpstream)
	resp := roundTrip(t, st, upstreamReq(t, "big", "vendor/chat-large", 1, true, internalHeaders()...))
	first := setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["authorization"]
	r := roundTrip(t, st, respHeaders(false, ":status", "429", "retry-after", "30"))
	tags := setOf(t, r.GetResponseHeaders().GetResponse().GetHeaderMutation())
	if tags[contract.HeaderBackend] != "big" || tags[contract.HeaderUpstreamKey] == "" {
		t.Errorf("attempt tags %v", tags)
	}
	cancel()
	// Attempt 2 of the same request must use the other key.
	st, cancel = h.stream(t, contract.RoleUpstream)
	defer cancel()
	resp = roundTrip(t, st, upstreamReq(t, "big", "vendor/chat-large", 2, true, internalHeaders()...))
	second := setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["authorization"]
	if first == "" || second == "" || first == second {
		t.Fatalf("attempt keys %q then %q", first, second)
	}
}

func TestUpstreamUnknownBackendStillStripsInternalHeaders(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := h.stream(t, contract.RoleUpstream)
	defer cancel()
	resp := roundTrip(t, st, upstreamReq(t, "nope", "", 1, true, internalHeaders("authorization", "Bearer sk-alpha")...))
	m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if !contains(m.GetRemoveHeaders(), contract.HeaderTenant) || !contains(m.GetRemoveHeaders(), "authorization") || len(m.GetSetHeaders()) != 0 {
		t.Errorf("mutation %v", m)
	}
}
