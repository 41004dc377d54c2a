package extproc_test

import (
	"strings"
	"testing"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/pairs"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// translationYAML: a chat relay with a small window, a chat provider with
// a large one, and an Anthropic provider, all on one alias.
const translationYAML = `
request:
  default_max_output_tokens: 100
  bytes_per_token: 4
backends:
  - {name: relay, base_url: "http://127.0.0.1:9/v1", families: [chat_completions], keys: [{id: r1, secret: env:R}]}
  - {name: oai, base_url: "http://127.0.0.1:9/v1", families: [chat_completions], keys: [{id: o1, secret: env:O}]}
  - {name: ant, base_url: "http://127.0.0.1:9/v1", api_style: anthropic, auth: x-api-key, keys: [{id: a1, secret: env:A}]}
models:
  - name: m
    targets:
      - {backend: relay, context_window: 1000}
      - {backend: oai, context_window: 8000}
      - {backend: ant, context_window: 200000}
tenants:
  - name: alpha
    models: ["*"]
    keys: [{id: alpha-1, hash: HASH}]
`

// TestRouterFamilyClusters: the router-level filter routes each request to
// the cluster of the targets that can serve it, as xds/ir generates them:
// natively or translated, natively only when the translator refuses a
// field (or for count_tokens), restricted further by context window.
func TestRouterFamilyClusters(t *testing.T) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	big := strings.Repeat("x", 8000) // ~2,000 tokens: above the relay's window
	tests := []struct {
		name, path, body string
		pool             string
	}{
		{"chat, every target", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, contract.Pool{Alias: "m"}.Cluster()},
		{"chat, too long for the relay", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + big + `"}]}`,
			contract.Pool{Alias: "m", MinContext: 8000}.Cluster()},
		{"chat, untranslatable: native only", "/v1/chat/completions", `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyChatCompletions, Native: true}.Cluster()},
		{"chat, untranslatable and too long for the relay", "/v1/chat/completions",
			`{"model":"m","n":2,"messages":[{"role":"user","content":"` + big + `"}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyChatCompletions, Native: true, MinContext: 8000}.Cluster()},
		{"messages, every target", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			contract.Pool{Alias: "m"}.Cluster()},
		{"messages, top_k: native only", "/v1/messages", `{"model":"m","max_tokens":10,"top_k":3,"messages":[{"role":"user","content":"hi"}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyAnthropicMessages, Native: true}.Cluster()},
		{"count_tokens: native only", "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyAnthropicMessages, Native: true}.Cluster()},
		{"responses: the chat speakers", "/v1/responses", `{"model":"m","input":"hi"}`,
			contract.Pool{Alias: "m", Family: config.FamilyResponses}.Cluster()},
		{"responses, too long for the relay", "/v1/responses", `{"model":"m","input":"` + big + `"}`,
			contract.Pool{Alias: "m", Family: config.FamilyResponses, MinContext: 8000}.Cluster()},
		// hosted_tools native_or_drop (default): a native target exists
		// for Messages, so a server tool sends the request there; none
		// speaks Responses, so its web_search is dropped and every
		// translating target may take it.
		{"messages with a server tool: native only", "/v1/messages",
			`{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyAnthropicMessages, Native: true}.Cluster()},
		{"responses with web_search: dropped, the chat speakers", "/v1/responses",
			`{"model":"m","input":"hi","tools":[{"type":"web_search"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]}`,
			contract.Pool{Alias: "m", Family: config.FamilyResponses}.Cluster()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", tc.path, ":authority", "gw", "authorization", "Bearer "+keyAlpha,
				"anthropic-version", "2023-06-01", "content-type", "application/json"))
			resp := roundTrip(t, st, reqBody(tc.body))
			cr := resp.GetRequestBody().GetResponse()
			if cr == nil {
				t.Fatalf("not admitted: %v", resp)
			}
			if got := setOf(t, cr.GetHeaderMutation())[contract.HeaderPool]; got != tc.pool {
				t.Errorf("pool %q, want %q", got, tc.pool)
			}
		})
	}
}

// TestRouterHostedToolsPolicy: backends[].hosted_tools decides where a
// request with a hosted tool goes: drop keeps every target, refuse sends
// it to the native ones or answers 400 naming the tool when there are
// none.
func TestRouterHostedToolsPolicy(t *testing.T) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	parse := func(policy string) *config.Config {
		y := strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)
		y = strings.ReplaceAll(y, "families: [chat_completions],", "families: [chat_completions], hosted_tools: "+policy+",")
		cfg, err := config.Parse([]byte(y), "t.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const messages = `{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`
	const responses = `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`
	tests := []struct {
		policy, path, body string
		pool               string // "" for a 400
	}{
		{"drop", "/v1/messages", messages, contract.Pool{Alias: "m"}.Cluster()},
		{"drop", "/v1/responses", responses, contract.Pool{Alias: "m", Family: config.FamilyResponses}.Cluster()},
		{"refuse", "/v1/messages", messages, contract.Pool{Alias: "m", Family: config.FamilyAnthropicMessages, Native: true}.Cluster()},
		{"refuse", "/v1/responses", responses, ""},
	}
	for _, tc := range tests {
		t.Run(tc.policy+tc.path, func(t *testing.T) {
			h := newHarness(t, parse(tc.policy))
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", tc.path, ":authority", "gw", "authorization", "Bearer "+keyAlpha,
				"anthropic-version", "2023-06-01", "content-type", "application/json"))
			resp := roundTrip(t, st, reqBody(tc.body))
			if tc.pool == "" {
				ir := resp.GetImmediateResponse()
				if ir == nil || ir.GetStatus().GetCode() != 400 || !strings.Contains(string(ir.GetBody()), "web_search") {
					t.Fatalf("want a 400 naming web_search, got %v", resp)
				}
				return
			}
			cr := resp.GetRequestBody().GetResponse()
			if cr == nil {
				t.Fatalf("not admitted: %v", resp)
			}
			if got := setOf(t, cr.GetHeaderMutation())[contract.HeaderPool]; got != tc.pool {
				t.Errorf("pool %q, want %q", got, tc.pool)
			}
		})
	}
}

// TestUpstreamDropsHostedTools: an attempt translated for the chat relay
// (hosted_tools native_or_drop, no native Responses target) is sent
// without the hosted web_search and with its namespace flattened, and the
// attempt's answer names what was dropped in x-swarmgate-dropped-tools.
func TestUpstreamDropsHostedTools(t *testing.T) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	const body = `{"model":"m","input":"hi","tools":[{"type":"web_search"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]},{"type":"code_interpreter","container":{"type":"auto"}}]}`
	headers := []string{":method", "POST", ":path", "/v1/responses", ":authority", "gw", "authorization", "Bearer " + keyAlpha,
		"x-request-id", "req-1", "content-type", "application/json"}
	rst, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, rst, reqHeaders(false, headers...))
	resp := roundTrip(t, rst, reqBody(body))
	md := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
	if md == nil {
		t.Fatalf("not admitted: %v", resp)
	}

	st, cancel2 := h.stream(t, contract.RoleUpstream)
	defer cancel2()
	resp = roundTrip(t, st, upstreamReq(t, "relay", "m", 1, false, md, headers...))
	if resp.GetModeOverride().GetRequestBodyMode() != extprocfilter.ProcessingMode_BUFFERED {
		t.Fatalf("no body asked for translation: %v", resp)
	}
	resp = roundTrip(t, st, reqBody(body))
	nb := string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody())
	if strings.Contains(nb, "web_search") || strings.Contains(nb, "code_interpreter") || !strings.Contains(nb, `"name":"ns__f"`) {
		t.Fatalf("translated body %s", nb)
	}
	resp = roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
	if got := setOf(t, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())[contract.HeaderDroppedTools]; got != "web_search,code_interpreter" {
		t.Errorf("%s = %q, want web_search,code_interpreter", contract.HeaderDroppedTools, got)
	}
}

// TestAttemptReusesRouterTranslation: the router-level filter translated
// the Messages body to check it can go to the chat targets; the first
// attempt on this replica sends that translation instead of translating
// again, and a retry (nothing kept) translates the same body itself.
func TestAttemptReusesRouterTranslation(t *testing.T) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	const body = `{"model":"m","max_tokens":10,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`
	headers := []string{":method", "POST", ":path", "/v1/messages", ":authority", "gw", "authorization", "Bearer " + keyAlpha,
		"anthropic-version", "2023-06-01", "content-type", "application/json"}
	rst, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, rst, reqHeaders(false, headers...))
	resp := roundTrip(t, rst, reqBody(body))
	md := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
	if md == nil {
		t.Fatalf("not admitted: %v", resp)
	}
	if n := h.srv.KeptTranslations(); n != 1 {
		t.Fatalf("%d translations kept, want the router's one", n)
	}
	want, err := pairs.Lookup(config.FamilyAnthropicMessages, config.FamilyChatCompletions).Request([]byte(body),
		translate.RequestOptions{Model: "m", DefaultMaxTokens: 100, Hosted: translate.DropHosted})
	if err != nil {
		t.Fatal(err)
	}
	for attempt, backend := range []string{"relay", "oai"} {
		st, cancel := h.stream(t, contract.RoleUpstream)
		roundTrip(t, st, upstreamReq(t, backend, "m", attempt+1, false, md, headers...))
		resp = roundTrip(t, st, reqBody(body))
		cancel()
		if got := resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); string(got) != string(want) {
			t.Errorf("attempt %d on %s sent %s, want %s", attempt+1, backend, got, want)
		}
		if n := h.srv.KeptTranslations(); n != 0 {
			t.Errorf("after attempt %d: %d translations still kept", attempt+1, n)
		}
	}
}
