package extproc_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// admission runs a request through the router-level filter and returns the
// dynamic metadata it admitted it with (what Envoy keeps for
// receiving_namespaces and forwards to each attempt's upstream filter).
func admission(t testing.TB, h *harness, body string, extra ...string) *structpb.Struct {
	t.Helper()
	st, cancel := h.stream(t, contract.RoleRouter)
	t.Cleanup(cancel)
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha, extra...)...))
	resp := roundTrip(t, st, reqBody(body))
	md := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
	if resp.GetRequestBody() == nil || md == nil {
		t.Fatalf("not admitted, or no admission metadata: %v", resp)
	}
	return md
}

const (
	chatBody  = `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`
	agentBody = `{"model":"agent","messages":[{"role":"user","content":"plan"}]}`
)

// upstreamReq is the first message of a per-attempt stream as Envoy sends
// it: request_attributes with the chosen host's metadata as text format,
// and the forwarded admission metadata as metadata_context.
func upstreamReq(t testing.TB, backend, model string, attempt int, eos bool, md *structpb.Struct, kv ...string) *extprocv3.ProcessingRequest {
	t.Helper()
	ns, _ := structpb.NewStruct(map[string]any{contract.EndpointBackend: backend, contract.EndpointUpstreamModel: model})
	text, _ := prototext.Marshal(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.MetadataNamespace: ns}})
	r := reqHeaders(eos, kv...)
	r.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		contract.AttrUpstreamHostMetadata: structpb.NewStringValue(string(text)),
		contract.AttrAttemptCount:         structpb.NewNumberValue(float64(attempt)),
	}}}
	if md != nil {
		r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.AdmissionNamespace: md}}
	}
	return r
}

// routedHeaders is the request header map as the first attempt's upstream
// filter sees it: the client's request after the router-level mutations.
func routedHeaders(extra ...string) []string {
	return append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", "x-request-id", "req-9",
		contract.HeaderPool, "pool_chat", "content-length", "63"}, extra...)
}

func TestUpstreamSetsCredentialPathAndModel(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody)
	tests := []struct {
		name, backend, model string
		credHeader, credVal  string
		path                 string
		rewrite              bool
	}{
		{"api-key backend with base path", "small", "chat", "api-key", "upstream-small-1", "/openai/v1/chat/completions", false},
		{"bearer backend with renamed model", "big", "vendor/chat-large", "authorization", "Bearer upstream-big-", "/v1/chat/completions", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleUpstream)
			defer cancel()
			resp := roundTrip(t, st, upstreamReq(t, tc.backend, tc.model, 1, false, md, routedHeaders()...))
			m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
			set := setOf(t, m)
			if got := set[tc.credHeader]; !strings.HasPrefix(got, tc.credVal) {
				t.Errorf("credential %s=%q", tc.credHeader, got)
			}
			if set[":path"] != tc.path {
				t.Errorf(":path %q want %q", set[":path"], tc.path)
			}
			if !contains(m.GetRemoveHeaders(), contract.HeaderPool) {
				t.Errorf("%s not removed", contract.HeaderPool)
			}
			if tc.backend == "small" && set["x-tenant-route"] != "blue" {
				t.Errorf("static header missing: %v", set)
			}
			ov := resp.GetModeOverride()
			if tc.rewrite != (ov.GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED) {
				t.Fatalf("mode override %v", ov)
			}
			if !tc.rewrite {
				if set["content-length"] != "63" {
					t.Errorf("content-length %q, want the admitted body's 63", set["content-length"])
				}
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

// applyMutation applies an upstream filter's header answer to a header map
// the way Envoy 1.38 does (source/extensions/filters/http/ext_proc/
// mutation_utils.cc: removals, then sets from raw_value, overwriting).
func applyMutation(hm map[string]string, m *extprocv3.HeaderMutation) {
	for _, k := range m.GetRemoveHeaders() {
		delete(hm, k)
	}
	for _, o := range m.GetSetHeaders() {
		hm[strings.ToLower(o.GetHeader().GetKey())] = string(o.GetHeader().GetRawValue())
	}
}

func flatten(hm map[string]string) []string {
	var kv []string
	for k, v := range hm {
		kv = append(kv, k, v)
	}
	return kv
}

// Envoy's upstream filters mutate the router's one request header map, so
// the second attempt starts from what the first left (upstream_request.cc,
// UpstreamRequest::acceptHeadersFromRouter, Envoy 1.38). An attempt to a
// relay with another base path, auth style and static headers must still
// leave with only its own.
func TestUpstreamAttemptsOnOneHeaderMap(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody)
	hm := map[string]string{}
	for kv := routedHeaders(); len(kv) > 0; kv = kv[2:] {
		hm[kv[0]] = kv[1]
	}
	steps := []struct {
		backend, model, path, cred, credPrefix string
		gone                                   []string
	}{
		{"small", "chat", "/openai/v1/chat/completions", "api-key", "upstream-small-1", []string{"authorization", contract.HeaderPool}},
		{"big", "vendor/chat-large", "/v1/chat/completions", "authorization", "Bearer upstream-big-", []string{"api-key", "x-tenant-route"}},
		{"small", "chat", "/openai/v1/chat/completions", "api-key", "upstream-small-1", []string{"authorization"}},
	}
	for i, s := range steps {
		st, cancel := h.stream(t, contract.RoleUpstream)
		resp := roundTrip(t, st, upstreamReq(t, s.backend, s.model, i+1, false, md, flatten(hm)...))
		applyMutation(hm, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())
		if resp.GetModeOverride().GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED {
			r := roundTrip(t, st, reqBody(chatBody))
			applyMutation(hm, r.GetRequestBody().GetResponse().GetHeaderMutation())
		}
		cancel()
		if hm[":path"] != s.path || !strings.HasPrefix(hm[s.cred], s.credPrefix) {
			t.Fatalf("attempt %d to %s: path %q, %s %q", i+1, s.backend, hm[":path"], s.cred, hm[s.cred])
		}
		for _, g := range s.gone {
			if _, ok := hm[g]; ok {
				t.Fatalf("attempt %d to %s still carries %s: %v", i+1, s.backend, g, hm)
			}
		}
		for k := range hm {
			if strings.HasPrefix(k, contract.HeaderPrefix) {
				t.Fatalf("attempt %d: internal header %s leaves Envoy", i+1, k)
			}
		}
		want := "63"
		if s.backend == "big" {
			want = "76" // the renamed body: "vendor/chat-large" for "chat"
		}
		if hm["content-length"] != want {
			t.Fatalf("attempt %d to %s: content-length %q, want %s", i+1, s.backend, hm["content-length"], want)
		}
		if s.backend == "small" && hm["x-tenant-route"] != "blue" {
			t.Fatalf("attempt %d: static header missing", i+1)
		}
	}
}

func TestUpstreamExcludesKeyAfter429(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody)
	// Attempt 1 gets a key and a 429.
	st, cancel := h.stream(t, contract.RoleUpstream)
	resp := roundTrip(t, st, upstreamReq(t, "big", "vendor/chat-large", 1, true, md, routedHeaders()...))
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
	resp = roundTrip(t, st, upstreamReq(t, "big", "vendor/chat-large", 2, true, md, routedHeaders()...))
	second := setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["authorization"]
	if first == "" || second == "" || first == second {
		t.Fatalf("attempt keys %q then %q", first, second)
	}
}

// noSecret fails when any part of an answer carries an upstream key.
func noSecret(t *testing.T, resp *extprocv3.ProcessingResponse) {
	t.Helper()
	b, _ := proto.Marshal(resp)
	if strings.Contains(string(b), "upstream-") {
		t.Fatalf("answer carries an upstream key: %v", resp)
	}
}

func TestUpstreamWithoutValidAdmissionGetsNoKey(t *testing.T) {
	h := newHarness(t, testConfig(t))
	good := admission(t, h, chatBody)
	token := good.GetFields()[contract.MetaAdmission].GetStringValue()
	with := func(tok string) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{contract.MetaAdmission: structpb.NewStringValue(tok)}}
	}
	dot := strings.LastIndexByte(token, '.')
	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 0x01
		return string(b)
	}
	// Tokens that are genuine but not this gateway's, or too old.
	otherCfg := testConfig(t)
	otherCfg.Identity.SigningKey = config.SecretFromValue("env:OTHER", "another fleet's signing key")
	if err := otherCfg.Prepare(config.Options{}); err != nil {
		t.Fatal(err)
	}
	other := admission(t, newHarness(t, otherCfg), chatBody)
	old := admission(t, newHarness(t, testConfig(t), func(o *extproc.Options) {
		o.Now = func() time.Time { return time.Now().Add(-3 * time.Hour) }
	}), chatBody)
	tests := []struct {
		name string
		md   *structpb.Struct
	}{
		{"no metadata", nil},
		{"no token", with("")},
		{"fields altered", with(flip(token, dot/2))},
		{"signature altered", with(flip(token, dot+3))},
		{"signature missing", with(token[:dot])},
		{"signed with another key", other},
		{"issued three hours ago", old},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleUpstream)
			defer cancel()
			resp := roundTrip(t, st, upstreamReq(t, "big", "", 1, true, tc.md, routedHeaders()...))
			noSecret(t, resp)
			ir := resp.GetImmediateResponse()
			if ir.GetStatus().GetCode() != http.StatusServiceUnavailable || !strings.Contains(string(ir.GetBody()), "gateway_not_admitted") {
				t.Fatalf("answer %v", resp)
			}
		})
	}
}

func TestUpstreamNoUsableKeyAnswersLocally(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody)
	// Open both keys of "big" with 429s carrying Retry-After.
	for range 2 {
		st, cancel := h.stream(t, contract.RoleUpstream)
		roundTrip(t, st, upstreamReq(t, "big", "", 1, true, md, routedHeaders()...))
		roundTrip(t, st, respHeaders(false, ":status", "429", "retry-after", "7"))
		cancel()
	}
	st, cancel := h.stream(t, contract.RoleUpstream)
	defer cancel()
	resp := roundTrip(t, st, upstreamReq(t, "big", "", 3, true, md, routedHeaders()...))
	noSecret(t, resp)
	ir := resp.GetImmediateResponse()
	set := setOf(t, ir.GetHeaders())
	// The keys rest 7 s, and the backend needs the EDS settle to come
	// back: 8 s, counted although this request tried both keys (the
	// client's retry is a new request). It said 1 s before.
	if ir.GetStatus().GetCode() != http.StatusTooManyRequests || !secondsLeft(set["retry-after"], 8) || set[contract.HeaderLocal] == "" ||
		!strings.Contains(string(ir.GetBody()), `"code":"upstream_keys_exhausted"`) {
		t.Fatalf("answer %v", resp)
	}
}

func TestUpstreamUnknownBackendGetsNoKey(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody)
	st, cancel := h.stream(t, contract.RoleUpstream)
	defer cancel()
	resp := roundTrip(t, st, upstreamReq(t, "nope", "", 1, true, md, routedHeaders("authorization", "Bearer sk-alpha")...))
	noSecret(t, resp)
	if resp.GetImmediateResponse() == nil {
		t.Errorf("an attempt to an unknown backend got %v", resp)
	}
}

// With every key of the attempt's backend open while another relay of the
// request's pool still has one, the attempt goes out on the key that
// reopens soonest, so that the provider's 429 makes Envoy retry on the
// other relay (a local reply would not be retried). A request with no
// other relay gets the local 429.
func TestUpstreamLastResortOnlyWhenThePoolHasAnotherRelay(t *testing.T) {
	h := newHarness(t, testConfig(t))
	// Both requests are admitted before the keys open (the window in which
	// admission still saw a key, but EDS has not moved the traffic).
	admitted := map[string]*structpb.Struct{
		chatBody:  admission(t, h, chatBody),
		agentBody: admission(t, h, agentBody),
	}
	opener := admission(t, h, chatBody)
	for range 2 {
		st, cancel := h.stream(t, contract.RoleUpstream)
		roundTrip(t, st, upstreamReq(t, "big", "", 1, true, opener, routedHeaders()...))
		roundTrip(t, st, respHeaders(false, ":status", "429", "retry-after", "7"))
		cancel()
	}
	tests := []struct {
		name    string
		body    string
		wantKey bool
	}{
		{"pool with another relay", chatBody, true},
		{"big is the only relay", agentBody, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := admitted[tc.body]
			st, cancel := h.stream(t, contract.RoleUpstream)
			defer cancel()
			resp := roundTrip(t, st, upstreamReq(t, "big", "", 1, true, md, routedHeaders()...))
			got := setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["authorization"] != ""
			if got != tc.wantKey {
				t.Fatalf("key given %v, want %v: %v", got, tc.wantKey, resp)
			}
			if !tc.wantKey && resp.GetImmediateResponse().GetStatus().GetCode() != http.StatusTooManyRequests {
				t.Fatalf("answer %v", resp)
			}
		})
	}
}

// recordingPicker remembers the PickRequests it was given.
type recordingPicker struct {
	extproc.KeyPicker
	got chan extproc.PickRequest
}

func (p recordingPicker) Pick(ctx context.Context, backend string, req extproc.PickRequest) (extproc.Lease, error) {
	p.got <- req
	return p.KeyPicker.Pick(ctx, backend, req)
}

// An attempt charges its key's TPM what the provider counts at request
// time, the prompt and the output it may write (max_tokens): keys have no
// stream-end top-up, and the prompt estimate alone let a key take several
// times its provider's TPM.
func TestAttemptChargesKeyPromptAndMaxOutput(t *testing.T) {
	cfg := testConfig(t)
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := recordingPicker{KeyPicker: wire.Keys(pools), got: make(chan extproc.PickRequest, 4)}
	h := newHarness(t, cfg, func(o *extproc.Options) { o.Keys = rec })
	md := admission(t, h, `{"model":"chat","max_tokens":700,"messages":[{"role":"user","content":"hello"}]}`)
	ad, ok := h.srv.ReadAdmission(md)
	if !ok {
		t.Fatal("admission unreadable")
	}
	st, cancel := h.stream(t, contract.RoleUpstream)
	defer cancel()
	roundTrip(t, st, upstreamReq(t, "small", "", 1, true, md, routedHeaders()...))
	select {
	case pr := <-rec.got:
		if pr.EstTokens != ad.EstTokens+700 {
			t.Errorf("pick charged %d tokens, want the prompt estimate %d + max_tokens 700", pr.EstTokens, ad.EstTokens)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pick")
	}
}
