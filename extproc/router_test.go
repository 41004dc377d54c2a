package extproc_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// estimate is chatreq's prompt estimate at the test config's 4 bytes/token.
func estimate(t testing.TB, body string) int64 {
	t.Helper()
	r, err := chatreq.Scan([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return int64(r.EstimatePromptTokens(4))
}

type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func chatHeaders(key string, extra ...string) []string {
	return append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", ":scheme", "http",
		"authorization", "Bearer " + key, "x-request-id", "req-1", "content-type", "application/json"}, extra...)
}

func TestRouterRefusals(t *testing.T) {
	h := newHarness(t, testConfig(t))
	long := `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 40000) + `"}]}`
	tests := []struct {
		name    string
		headers []string
		noBody  bool
		body    string
		status  int
		code    string
		msgHas  string
	}{
		{"no key", []string{":method", "POST", ":path", "/v1/chat/completions"}, false, "", 401, "invalid_api_key", "didn't provide"},
		{"unknown key", chatHeaders("sk-nope"), false, "", 401, "invalid_api_key", "Incorrect"},
		{"revoked key", chatHeaders(keyRevoked), false, "", 401, "key_revoked", "revoked"},
		{"x-api-key unknown", []string{":method", "POST", ":path", "/v1/chat/completions", "x-api-key", "zzz"}, false, "", 401, "invalid_api_key", ""},
		{"unknown path", []string{":method", "POST", ":path", "/v1/images", "authorization", "Bearer " + keyAlpha}, false, "", 404, "unknown_url", "/v1/images"},
		{"wrong method", []string{":method", "GET", ":path", "/v1/chat/completions", "authorization", "Bearer " + keyAlpha}, false, "", 405, "method_not_allowed", ""},
		{"content-length too large", chatHeaders(keyAlpha, "content-length", "5000"), false, "", 413, "request_too_large", "4096 bytes"},
		{"no body", chatHeaders(keyAlpha), true, "", 400, "invalid_json", ""},
		{"body too large", chatHeaders(keyAlpha), false, long, 413, "request_too_large", "4096"},
		{"malformed json", chatHeaders(keyAlpha), false, "{\"model\":\"chat\",\n \"messages\": [}", 400, "invalid_json", "line 2, column 15"},
		{"bad field", chatHeaders(keyAlpha), false, `{"model":"chat","stream":"yes"}`, 400, "invalid_value", "stream"},
		{"no model", chatHeaders(keyAlpha), false, `{"messages":[]}`, 400, "invalid_value", "model"},
		{"unknown model", chatHeaders(keyAlpha), false, `{"model":"gpt-9"}`, 404, "model_not_found", "gpt-9"},
		{"model not allowed", chatHeaders(keyAlpha), false, `{"model":"secret-model"}`, 403, "model_not_allowed", "secret-model"},
		{"context too long", chatHeaders(keyAlpha), false, `{"model":"chat","max_tokens":9000,"messages":[{"role":"user","content":"hi"}]}`, 400, "context_length_exceeded", "maximum context length is 8000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "body too large" {
				// Content-length absent (chunked): caught at the body phase.
			}
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			resp := roundTrip(t, st, reqHeaders(tc.noBody, tc.headers...))
			if resp.GetImmediateResponse() == nil && tc.body != "" {
				if rm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, "authorization") {
					t.Errorf("authorization not removed: %v", rm)
				}
				resp = roundTrip(t, st, reqBody(tc.body))
			}
			ir := resp.GetImmediateResponse()
			if ir == nil {
				t.Fatalf("no immediate response: %v", resp)
			}
			if int(ir.GetStatus().GetCode()) != tc.status {
				t.Errorf("status %d, want %d", ir.GetStatus().GetCode(), tc.status)
			}
			var e openAIError
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil {
				t.Fatalf("body %q: %v", ir.GetBody(), err)
			}
			if e.Error.Code == nil || *e.Error.Code != tc.code || e.Error.Type == "" || !strings.Contains(e.Error.Message, tc.msgHas) {
				t.Errorf("error %s", ir.GetBody())
			}
			if setOf(t, ir.GetHeaders())["content-type"] != "application/json" {
				t.Error("content-type not json")
			}
			if strings.Contains(string(ir.GetBody()), "secret-model") && tc.code != "model_not_allowed" {
				t.Error("error lists a model")
			}
		})
	}
}

func TestModelsListsOnlyAllowed(t *testing.T) {
	h := newHarness(t, testConfig(t))
	for _, tc := range []struct {
		key, path string
		status    int
		want      []string
	}{
		{keyAlpha, "/v1/models", 200, []string{"chat", "agent"}},
		{keyBeta, "/v1/models?limit=5", 200, []string{"chat", "secret-model", "agent"}},
		{keyAlpha, "/v1/models/chat", 200, []string{"chat"}},
		{keyAlpha, "/v1/models/secret-model", 404, nil},
	} {
		st, cancel := h.stream(t, contract.RoleRouter)
		resp := roundTrip(t, st, reqHeaders(true, ":method", "GET", ":path", tc.path, "authorization", "Bearer "+tc.key))
		cancel()
		ir := resp.GetImmediateResponse()
		if int(ir.GetStatus().GetCode()) != tc.status {
			t.Fatalf("%s: status %v", tc.path, ir.GetStatus())
		}
		if tc.status != 200 {
			continue
		}
		var list struct {
			Object string `json:"object"`
			Data   []struct{ ID, Object string }
		}
		var one struct{ ID, Object string }
		if strings.HasPrefix(tc.path, "/v1/models/") {
			if err := json.Unmarshal(ir.GetBody(), &one); err != nil || one.ID != tc.want[0] || one.Object != "model" {
				t.Fatalf("%s: %s %v", tc.path, ir.GetBody(), err)
			}
			continue
		}
		if err := json.Unmarshal(ir.GetBody(), &list); err != nil || list.Object != "list" {
			t.Fatalf("%s: %s %v", tc.path, ir.GetBody(), err)
		}
		var got []string
		for _, d := range list.Data {
			got = append(got, d.ID)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: got %v want %v", tc.path, got, tc.want)
		}
	}
}

// TestModelsRefusalsInAnthropicShape: the model list serves both APIs, so
// an Anthropic client (anthropic-version) gets its refusals in Anthropic's
// shape too, not only the list: a bad key, a wrong method, an unknown
// model.
func TestModelsRefusalsInAnthropicShape(t *testing.T) {
	h := newHarness(t, testConfig(t))
	for _, tc := range []struct {
		name, method, path, key string
		status                  int
	}{
		{"bad key", "GET", "/v1/models", "sk-nope", 401},
		{"wrong method", "POST", "/v1/models", keyAlpha, 400},
		{"unknown model", "GET", "/v1/models/secret-model", keyAlpha, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			resp := roundTrip(t, st, reqHeaders(true, ":method", tc.method, ":path", tc.path, "x-api-key", tc.key, "anthropic-version", "2023-06-01"))
			ir := resp.GetImmediateResponse()
			var body struct {
				Type  string                `json:"type"`
				Error struct{ Type string } `json:"error"`
			}
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil || int(ir.GetStatus().GetCode()) != tc.status || body.Type != "error" || body.Error.Type == "" {
				t.Fatalf("status %v body %s: want %d in Anthropic's shape", ir.GetStatus(), ir.GetBody(), tc.status)
			}
			if set := setOf(t, ir.GetHeaders()); set["request-id"] == "" {
				t.Errorf("no request-id header: %v", set)
			}
		})
	}
}

func TestRouterAdmitsAndWritesRoutingHeaders(t *testing.T) {
	h := newHarness(t, testConfig(t))
	tests := []struct {
		name, body string
		pool       string
		long       bool
		inject     bool
	}{
		{"plain", `{"model":"chat","messages":[{"role":"user","content":"hello there"}]}`, contract.Pool{Alias: "chat"}.Cluster(), false, false},
		{"stream without usage", `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`, contract.Pool{Alias: "chat"}.Cluster(), false, true},
		{"stream with usage", `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, contract.Pool{Alias: "chat"}.Cluster(), false, false},
		{"tools are long", `{"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[]}`, contract.Pool{Alias: "chat"}.Cluster(), true, false},
		{"max_tokens long, skips small window", `{"model":"chat","max_tokens":2000,"messages":[]}`, contract.Pool{Alias: "chat", MinContext: 8000}.Cluster(), true, false},
		{"long_running model", `{"model":"agent","messages":[]}`, contract.Pool{Alias: "agent"}.Cluster(), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			resp := roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha, "x-swarmgate-pool", "pool_evil", "X-Swarmgate-Tenant", "beta", "x-session-id", "s-1",
				"openai-organization", "org-other", "openai-project", "proj_other")...))
			rm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders()
			if !contains(rm, "x-swarmgate-pool") || !contains(rm, "x-swarmgate-tenant") {
				t.Fatalf("client internal headers not stripped: %v", rm)
			}
			if !contains(rm, "openai-organization") || !contains(rm, "openai-project") {
				t.Fatalf("the client chose the provider organisation or project: %v", rm)
			}
			resp = roundTrip(t, st, reqBody(tc.body))
			cr := resp.GetRequestBody().GetResponse()
			if cr == nil {
				t.Fatalf("not admitted: %v", resp)
			}
			set := setOf(t, cr.GetHeaderMutation())
			if !cr.GetClearRouteCache() || set[contract.HeaderPool] != tc.pool {
				t.Errorf("routing headers %v clear=%v", set, cr.GetClearRouteCache())
			}
			for k := range set {
				if strings.HasPrefix(k, contract.HeaderPrefix) && k != contract.HeaderPool && k != contract.HeaderLong {
					t.Errorf("%s set as a header: only what the route matches on travels in headers", k)
				}
			}
			// What later stages read is dynamic metadata: the upstream
			// filters share and strip the request header map.
			md := resp.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
			if md[contract.MetaTenant].GetStringValue() != "alpha" || md[contract.MetaVirtualKey].GetStringValue() != "alpha-1" ||
				!strings.Contains(tc.body, `"`+md[contract.MetaModel].GetStringValue()+`"`) || md[contract.MetaEstTokens].GetNumberValue() <= 0 ||
				!strings.HasPrefix(md[contract.MetaRequestID].GetStringValue(), "sg-") {
				t.Errorf("metadata for the rate-limit filter %v", md)
			}
			// The attempt's admission token, as the upstream filter reads it.
			ad, ok := h.srv.ReadAdmission(resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue())
			if !ok || ad.RequestID != md[contract.MetaRequestID].GetStringValue() || ad.Sticky != "s-1" || ad.Path != "/v1/chat/completions" ||
				ad.EstTokens != int(md[contract.MetaEstTokens].GetNumberValue()) {
				t.Errorf("admission token %+v ok=%v", ad, ok)
			}
			if (set[contract.HeaderLong] == "1") != tc.long {
				t.Errorf("long=%q want %v", set[contract.HeaderLong], tc.long)
			}
			nb := cr.GetBodyMutation().GetBody()
			if tc.inject != (nb != nil) {
				t.Fatalf("body mutation %q", nb)
			}
			if tc.inject {
				if !strings.Contains(string(nb), `"stream_options":{"include_usage":true}`) || set["content-length"] != strconv.Itoa(len(nb)) {
					t.Errorf("injected body %q content-length %q", nb, set["content-length"])
				}
				if ad.BodyBytes != len(nb) {
					t.Errorf("body size %d, want the injected body's %d", ad.BodyBytes, len(nb))
				}
			} else if ad.BodyBytes != len(tc.body) {
				t.Errorf("body size %d, want %d", ad.BodyBytes, len(tc.body))
			}
		})
	}
}

func TestReservationRefused(t *testing.T) {
	h := newHarness(t, testConfig(t))
	h.cap.grant = false
	st, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
	body := `{"model":"chat","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	resp := roundTrip(t, st, reqBody(body))
	ir := resp.GetImmediateResponse()
	set := setOf(t, ir.GetHeaders())
	if ir.GetStatus().GetCode() != 429 || set["retry-after"] != "2" || set["x-ratelimit-remaining-tokens"] != "10" || set["x-ratelimit-limit-tokens"] != "1000" {
		t.Fatalf("%v %v", ir.GetStatus(), set)
	}
	if r := h.cap.reserved[0]; r.Tenant != "alpha" || r.Model != "chat" || int64(r.PromptTokens) != estimate(t, body) || r.MaxOutputTokens != 50 || !strings.HasPrefix(r.RequestID, "sg-") {
		t.Errorf("reserve request %+v", r)
	}
}

// exchange runs an admitted request through response phases.
func admit(t *testing.T, h *harness, body string) (extprocv3.ExternalProcessor_ProcessClient, func()) {
	t.Helper()
	st, cancel := h.stream(t, contract.RoleRouter)
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
	if resp := roundTrip(t, st, reqBody(body)); resp.GetRequestBody() == nil {
		t.Fatalf("not admitted: %v", resp)
	}
	return st, cancel
}

func TestResponseUsageJSON(t *testing.T) {
	h := newHarness(t, testConfig(t))
	req := `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`
	st, cancel := admit(t, h, req)
	defer cancel()
	// "small" is asked for the alias itself: nothing to rename, the
	// chunks pass untouched (TestAnswersNameTheAlias covers renaming).
	resp := roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", contract.HeaderBackend, "small", contract.HeaderUpstreamKey, "small-1"))
	if rm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, contract.HeaderBackend) {
		t.Errorf("attempt tags not removed: %v", rm)
	}
	body := fixture(t, "openai_chat.json")
	half := len(body) / 2
	if r := roundTrip(t, st, respBody(body[:half], false)); r.GetResponseBody().GetResponse().GetBodyMutation() != nil || r.GetDynamicMetadata() != nil {
		t.Errorf("JSON chunk mutated or metadata early: %v", r)
	}
	r := roundTrip(t, st, respBody(body[half:], true))
	md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
	if md[contract.MetaPromptTokens].GetNumberValue() != 1117 || md[contract.MetaCompletionTokens].GetNumberValue() != 46 ||
		md[contract.MetaTotalTokens].GetNumberValue() != 1163 {
		t.Fatalf("metadata %v", md)
	}
	// Top-up is completion plus the prompt above the request-time estimate.
	if md[contract.MetaTokensTopUp].GetNumberValue() != float64(46+1117-estimate(t, req)) {
		t.Errorf("top-up %v", md[contract.MetaTokensTopUp])
	}
	e := h.cap.waitEntry(t)
	if e.Usage.PromptTokens != 1117 || e.Backend != "small" || e.UpstreamKeyID != "small-1" || e.Estimated || e.Tenant != "alpha" || !strings.HasPrefix(e.RequestID, "sg-") {
		t.Errorf("entry %+v", e)
	}
	if h.cap.settled["res-"+e.RequestID] != 1163 {
		t.Errorf("settled %v", h.cap.settled)
	}
}

func TestResponseSSEHidesInjectedUsage(t *testing.T) {
	sse := fixture(t, "openai_chat_include_usage.sse")
	for _, clientAsked := range []bool{false, true} {
		h := newHarness(t, testConfig(t))
		body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
		if clientAsked {
			body = `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[]}`
		}
		st, cancel := admit(t, h, body)
		roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		var out []byte
		// Split at awkward places: usage parsing must cross chunk boundaries.
		for i := 0; i < len(sse); i += 97 {
			end := min(i+97, len(sse))
			r := roundTrip(t, st, respBody(sse[i:end], false))
			if m := r.GetResponseBody().GetResponse().GetBodyMutation(); m != nil {
				out = append(out, m.GetBody()...)
			} else {
				out = append(out, sse[i:end]...)
			}
		}
		r := roundTrip(t, st, respBody(nil, true))
		out = append(out, r.GetResponseBody().GetResponse().GetBodyMutation().GetBody()...)
		cancel()
		hasUsage := strings.Contains(string(out), `"prompt_tokens":19`)
		if hasUsage != clientAsked || !strings.Contains(string(out), "[DONE]") || !strings.Contains(string(out), `"Hello"`) {
			t.Errorf("clientAsked=%v: usage chunk present=%v; out tail %q", clientAsked, hasUsage, out[max(0, len(out)-300):])
		}
		md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
		if md[contract.MetaPromptTokens].GetNumberValue() != 19 || md[contract.MetaCompletionTokens].GetNumberValue() != 10 {
			t.Errorf("metadata %v", md)
		}
		if e := h.cap.waitEntry(t); e.Usage.TotalTokens != 29 || !e.Streamed {
			t.Errorf("entry %+v", e)
		}
	}
}

func TestDisconnectBilling(t *testing.T) {
	sse := fixture(t, "openai_chat_include_usage.sse")
	cut := strings.Index(string(sse), `"finish_reason":"stop"`) // before the usage chunk
	tests := []struct {
		policy     string
		prompt     int64
		completion int64
	}{
		{"reported", 0, 0}, // no usage seen: billed as delivered
		{"delivered", 0, 0},
		{"reserved", 0, 100},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Accounting.BillOnDisconnect = tc.policy
			h := newHarness(t, cfg)
			req := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
			tc.prompt = estimate(t, req)
			st, cancel := admit(t, h, req)
			roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
			roundTrip(t, st, respBody(sse[:cut], false))
			cancel() // Envoy resets the stream: client gone.
			e := h.cap.waitEntry(t)
			if !e.Disconnected || !e.Estimated || e.Usage.PromptTokens != tc.prompt {
				t.Fatalf("entry %+v", e)
			}
			if tc.policy == "reserved" && e.Usage.CompletionTokens != tc.completion {
				t.Errorf("completion %d", e.Usage.CompletionTokens)
			}
			if tc.policy != "reserved" && e.Usage.CompletionTokens == 0 {
				t.Errorf("delivered content not billed: %+v", e.Usage)
			}
		})
	}
}

func TestResponseErrorStatusReleases(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "429", "content-type", "application/json"))
	r := roundTrip(t, st, respBody([]byte(`{"error":{"message":"slow down"}}`), true))
	if r.GetDynamicMetadata() != nil {
		t.Errorf("metadata on an error: %v", r.GetDynamicMetadata())
	}
	// No provider served it: the hold is released, nothing is billed.
	h.cap.waitEntry(t)
	if len(h.cap.released) != 1 || len(h.cap.entries) != 0 {
		t.Errorf("released %v entries %v", h.cap.released, h.cap.entries)
	}
}

// The default max_body_bytes (8 MiB) travels in one ext_proc message each
// way; the server options lift grpc-go's 4 MiB limit.
func TestLargestDefaultBodyOverGRPC(t *testing.T) {
	cfg := testConfig(t)
	cfg.Request.MaxBodyBytes = 8 << 20
	cfg.Models[0].Targets[0].ContextWindow, cfg.Models[0].Targets[1].ContextWindow = 0, 0
	h := newHarness(t, cfg)
	st, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("y", 8<<20-100) + `"}]}`
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha, "content-length", strconv.Itoa(len(body)))...))
	resp := roundTrip(t, st, reqBody(body))
	if nb := resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); len(nb) <= len(body) {
		t.Fatalf("no injected body back (%d bytes): %v", len(nb), resp.GetImmediateResponse())
	}
}

func TestResponseUsageGzipJSON(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write(fixture(t, "openai_chat.json"))
	_ = zw.Close()
	z := zb.Bytes()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", "content-encoding", "gzip"))
	var r *extprocv3.ProcessingResponse
	for i := 0; i < len(z); i += 100 {
		r = roundTrip(t, st, respBody(z[i:min(i+100, len(z))], false))
		if r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
			t.Fatal("gzip body mutated")
		}
	}
	r = roundTrip(t, st, respBody(nil, true))
	md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
	if md[contract.MetaTotalTokens].GetNumberValue() != 1163 {
		t.Fatalf("metadata %v", md)
	}
}

// A provider whose last SSE event (the usage chunk) lacks its closing blank
// line: the usage is still counted, not billed as "delivered".
func TestResponseSSEUnterminatedUsageEvent(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
	roundTrip(t, st, respBody([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"), false))
	roundTrip(t, st, respBody([]byte(`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`), true))
	if e := h.cap.waitEntry(t); e.Usage.TotalTokens != 10 || e.Estimated {
		t.Errorf("entry %+v: want the provider's usage (10 tokens)", e)
	}
}

// Router streams are pooled with their SSE parser and filter: what one
// request leaves in them (usage already seen, part of an event held back)
// must not reach the next request on the same pooled state.
func TestSSEStateDoesNotCarryOver(t *testing.T) {
	// One P: sync.Pool hands a stream back to the next Get on the same P
	// (its private slot), so each request reuses the previous one's state.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	sse := fixture(t, "openai_chat_include_usage.sse")
	usageAt := strings.Index(string(sse), `data: {"id":"chatcmpl-usage"`)
	if usageAt < 0 {
		usageAt = strings.LastIndex(string(sse[:strings.Index(string(sse), `"usage":{"prompt_tokens"`)]), "data: ")
	}
	afterUsage := usageAt + strings.Index(string(sse[usageAt:]), "\n\n") + 2
	var f usage.StreamFilter
	want := append(append([]byte(nil), f.Write(sse)...), f.Flush()...) // a fresh filter's output
	h := newHarness(t, testConfig(t))
	body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	// send streams sse[:n] (all of it with end_of_stream when n < 0) and
	// returns the bytes forwarded, the last answer and the ledger entry.
	send := func(n int) ([]byte, *extprocv3.ProcessingResponse, extproc.Entry) {
		t.Helper()
		st, cancel := admit(t, h, body)
		defer cancel()
		roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		part := sse
		if n >= 0 {
			part = sse[:n]
		}
		var out []byte
		var r *extprocv3.ProcessingResponse
		for i := 0; i < len(part); i += 97 {
			end := min(i+97, len(part))
			r = roundTrip(t, st, respBody(part[i:end], false))
			if m := r.GetResponseBody().GetResponse().GetBodyMutation(); m != nil {
				out = append(out, m.GetBody()...)
			} else {
				out = append(out, part[i:end]...)
			}
		}
		if n < 0 {
			r = roundTrip(t, st, respBody(nil, true))
			out = append(out, r.GetResponseBody().GetResponse().GetBodyMutation().GetBody()...)
		}
		cancel() // a cut stream: the client is gone
		return out, r, h.cap.waitEntry(t)
	}
	for round := range 4 {
		// Cut after the usage event: usage reported, billed as such.
		if _, _, e := send(afterUsage); !e.Disconnected || e.Estimated || e.Usage.TotalTokens != 29 {
			t.Fatalf("round %d: cut after usage: entry %+v", round, e)
		}
		// Cut before it: nothing reported for this request.
		if _, _, e := send(usageAt); !e.Disconnected || !e.Estimated {
			t.Fatalf("round %d: cut before usage billed the previous request's usage: %+v", round, e)
		}
		// Cut inside it: the filter holds part of the event back.
		send(usageAt + 40)
		out, r, e := send(-1)
		if !bytes.Equal(out, want) {
			t.Fatalf("round %d: forwarded stream differs from a fresh filter's:\n got %q\nwant %q", round, out, want)
		}
		md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
		if md[contract.MetaPromptTokens].GetNumberValue() != 19 || e.Usage.TotalTokens != 29 || e.Disconnected || e.Estimated {
			t.Fatalf("round %d: metadata %v entry %+v", round, md, e)
		}
	}
}

// TestStreamUsageReachesEnvoyBeforeTheEnd: the chunk that carries a
// stream's usage sends the token metadata at once. SDKs close at [DONE];
// when the provider's end of stream comes after it, Envoy destroys the
// stream before the end-of-stream answer, and the rate-limit filter's
// stream-done charge reads only what was sent before.
func TestStreamUsageReachesEnvoyBeforeTheEnd(t *testing.T) {
	sse := fixture(t, "openai_chat_include_usage.sse")
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
	sent := 0
	for i := 0; i < len(sse); i += 97 {
		r := roundTrip(t, st, respBody(sse[i:min(i+97, len(sse))], false))
		md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
		if md == nil {
			continue
		}
		sent++
		if md[contract.MetaPromptTokens].GetNumberValue() != 19 || md[contract.MetaCompletionTokens].GetNumberValue() != 10 ||
			md[contract.MetaTokensTopUp].GetNumberValue() == 0 {
			t.Errorf("metadata before the end: %v", md)
		}
	}
	if sent != 1 {
		t.Fatalf("token metadata sent with %d chunks before the end, want exactly the usage chunk's", sent)
	}
}

// TestStreamReadToItsEndIsNoDisconnect: an SDK closes the connection once
// it has read [DONE]; when the provider's end of stream comes later, the
// stream ends without end_of_stream. The client had the whole answer: the
// entry is billed at the reported usage and not counted as a disconnect,
// under every bill_on_disconnect policy.
func TestStreamReadToItsEndIsNoDisconnect(t *testing.T) {
	sse := fixture(t, "openai_chat_include_usage.sse")
	for _, policy := range []string{"reported", "delivered", "reserved"} {
		t.Run(policy, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Accounting.BillOnDisconnect = policy
			h := newHarness(t, cfg)
			st, cancel := admit(t, h, `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
			roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
			roundTrip(t, st, respBody(sse, false))
			cancel() // the stream ends before the provider's end of stream
			e := h.cap.waitEntry(t)
			if e.Disconnected || e.Estimated || e.Usage.PromptTokens != 19 || e.Usage.CompletionTokens != 10 {
				t.Fatalf("entry %+v, want the reported 19+10 and no disconnect", e)
			}
		})
	}
}

// TestStreamWithoutUsageChargesDeliveredBeforeTheEnd: with token_limits
// ratelimit, a stream with no usage report (a provider that ignores
// include_usage) sends what was delivered, estimated, as it grows and at
// its last event: an SDK closing at [DONE] ends the stream before its end
// of stream, and the rate-limit filter's charge read nothing.
func TestStreamWithoutUsageChargesDeliveredBeforeTheEnd(t *testing.T) {
	for _, mode := range []string{"ratelimit", "reserve with sub-keys"} {
		t.Run(mode, func(t *testing.T) { streamChargesDelivered(t, mode) })
	}
}

// streamChargesDelivered: with sub-keys on, their TPM windows (and their
// minters') take a stream's tokens at stream end in both modes.
func streamChargesDelivered(t *testing.T, mode string) {
	cfg := testConfig(t)
	cfg.Accounting.TokenLimits = "ratelimit"
	if mode != "ratelimit" {
		cfg.Accounting.TokenLimits, cfg.Subkeys.Enabled = "reserve", true
	}
	h := newHarness(t, cfg)
	st, cancel := admit(t, h, `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
	chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 100) + `"}}]}` + "\n\n")
	var sent []float64
	send := func(b []byte) {
		r := roundTrip(t, st, respBody(b, false))
		if md := r.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields(); md != nil {
			sent = append(sent, md[contract.MetaCompletionTokens].GetNumberValue())
		}
	}
	for range 20 {
		send(chunk)
	}
	send([]byte("data: [DONE]\n\n"))
	if len(sent) < 3 || len(sent) > 8 {
		t.Fatalf("token metadata sent %d times (%v); want a few as the estimate grows", len(sent), sent)
	}
	for i := 1; i < len(sent); i++ {
		if sent[i] <= sent[i-1] {
			t.Errorf("completion estimate not growing: %v", sent)
		}
	}
	if last := sent[len(sent)-1]; last != 500 { // 2,000 content bytes at 4 bytes a token
		t.Errorf("completion estimate at [DONE] %v, want 500", last)
	}
}

// TestLargeJSONAnswerUsageFromItsTail: a non-streamed answer larger than
// what is kept whole (8 MiB: a large embeddings batch, a long completion)
// has its usage read from its last bytes: it was billed the prompt
// estimate, its output free.
func TestLargeJSONAnswerUsageFromItsTail(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", contract.HeaderBackend, "small", contract.HeaderUpstreamKey, "small-1"))
	body := []byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("y", 9<<20) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2359296,"total_tokens":2359303},"system_fingerprint":"fp"}`)
	for i := 0; i < len(body); i += 1 << 20 {
		end := min(i+1<<20, len(body))
		roundTrip(t, st, respBody(body[i:end], end == len(body)))
	}
	e := h.cap.waitEntry(t)
	if e.Estimated || e.Usage.PromptTokens != 7 || e.Usage.CompletionTokens != 2359296 {
		t.Fatalf("entry usage %+v estimated %v; want the reported 7 + 2359296", e.Usage, e.Estimated)
	}
}
