package extproc_test

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/logbuf"
)

// configWith is the test config with its YAML changed by edit.
func configWith(t *testing.T, edit func(string) string) *config.Config {
	t.Helper()
	env := map[string]string{"K_SMALL_1": "upstream-small-1", "K_BIG_1": "upstream-big-1", "K_BIG_2": "upstream-big-2"}
	c, err := config.Parse([]byte(edit(testYAML())), "test.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Answers name the alias the client asked for ("chat"), not the model the
// backend was asked for ("vendor/chat-large" on "big") nor the snapshot the
// provider reports: JSON and SSE, cut anywhere, native and translated,
// compressed too; unless the backend sets expose_upstream_model. The
// upstream name stays in the ledger entry and the access log.
func TestAnswersNameTheAlias(t *testing.T) {
	chatJSON := fixture(t, "openai_chat.json")
	chatSSE := fixture(t, "openai_chat_include_usage.sse")
	for _, tc := range []struct {
		name       string
		path, body string
		ctype      string
		answer     []byte
		gzip       bool
		expose     bool
		backend    string
		want       []string // in what the client gets
		wantNot    []string
	}{
		{name: "chat JSON", path: "/v1/chat/completions", body: `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
			ctype: "application/json", answer: chatJSON, backend: "big",
			want: []string{`"model": "chat"`}, wantNot: []string{"gpt-4o", "vendor/chat-large"}},
		{name: "chat SSE", path: "/v1/chat/completions", body: `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			ctype: "text/event-stream", answer: chatSSE, backend: "big",
			want: []string{`"model":"chat"`}, wantNot: []string{"gpt-4o", "vendor/chat-large"}},
		{name: "chat JSON gzip", path: "/v1/chat/completions", body: `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
			ctype: "application/json", answer: chatJSON, gzip: true, backend: "big",
			want: []string{`"model": "chat"`}, wantNot: []string{"gpt-4o"}},
		{name: "Messages translated JSON", path: "/v1/messages", body: `{"model":"chat","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
			ctype: "application/json", answer: chatJSON, backend: "big",
			want: []string{`"model":"chat"`, `"type":"message"`}, wantNot: []string{"gpt-4o"}},
		{name: "Messages translated SSE", path: "/v1/messages", body: `{"model":"chat","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
			ctype: "text/event-stream", answer: chatSSE, backend: "big",
			want: []string{`"model":"chat"`, "message_start"}, wantNot: []string{"gpt-4o"}},
		{name: "Responses translated JSON", path: "/v1/responses", body: `{"model":"chat","input":"hi"}`,
			ctype: "application/json", answer: chatJSON, backend: "big",
			want: []string{`"model":"chat"`, `"object":"response"`}, wantNot: []string{"gpt-4o"}},
		{name: "Responses translated SSE", path: "/v1/responses", body: `{"model":"chat","stream":true,"input":"hi"}`,
			ctype: "text/event-stream", answer: chatSSE, backend: "big",
			want: []string{`"model":"chat"`, "response.completed"}, wantNot: []string{"gpt-4o"}},
		{name: "exposed", path: "/v1/chat/completions", body: `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
			ctype: "application/json", answer: chatJSON, expose: true, backend: "big",
			want: []string{`"model": "gpt-4o-2024-08-06"`}},
		{name: "asked for the alias itself", path: "/v1/chat/completions", body: `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
			ctype: "application/json", answer: chatJSON, backend: "small",
			want: []string{`"model": "gpt-4o-2024-08-06"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configWith(t, func(y string) string {
				if tc.expose {
					y = strings.Replace(y, "    auth: bearer\n", "    auth: bearer\n    expose_upstream_model: true\n", 1)
				}
				return y
			})
			var buf logbuf.Buffer
			h := newHarness(t, cfg, withAccessLog(&buf))
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", tc.path, "authorization", "Bearer "+keyAlpha))
			if r := roundTrip(t, st, reqBody(tc.body)); r.GetRequestBody() == nil {
				t.Fatalf("not admitted: %v", r)
			}
			answer := tc.answer
			kv := []string{":status", "200", "content-type", tc.ctype, contract.HeaderBackend, tc.backend, contract.HeaderUpstreamKey, tc.backend + "-1"}
			if tc.gzip {
				answer = gzipped(t, answer)
				kv = append(kv, "content-encoding", "gzip")
			}
			rh := roundTrip(t, st, respHeaders(false, kv...))
			if tc.gzip && !contains(rh.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "content-encoding") {
				t.Error("a renamed compressed answer keeps content-encoding")
			}
			// Cut into 7-byte chunks: values and keys split everywhere.
			var got []byte
			for i := 0; i < len(answer); i += 7 {
				chunk := answer[i:min(i+7, len(answer))]
				r := roundTrip(t, st, respBody(chunk, i+7 >= len(answer)))
				if m := r.GetResponseBody().GetResponse().GetBodyMutation(); m != nil {
					got = append(got, m.GetBody()...)
				} else {
					got = append(got, chunk...)
				}
			}
			for _, w := range tc.want {
				if !bytes.Contains(got, []byte(w)) {
					t.Errorf("answer lacks %s:\n%s", w, got)
				}
			}
			for _, w := range tc.wantNot {
				if bytes.Contains(got, []byte(w)) {
					t.Errorf("answer still names %s:\n%s", w, got)
				}
			}
			e := h.cap.waitEntry(t)
			wantUp := map[string]string{"big": "vendor/chat-large", "small": "chat"}[tc.backend]
			if e.Model != "chat" || e.UpstreamModel != wantUp {
				t.Errorf("entry model %q upstream %q, want chat and %s", e.Model, e.UpstreamModel, wantUp)
			}
			if e.Usage.TotalTokens == 0 {
				t.Errorf("usage lost: %+v", e.Usage)
			}
			if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["upstream_model"] != wantUp || lines[0]["model"] != "chat" {
				t.Errorf("access log %v", lines)
			}
		})
	}
}
