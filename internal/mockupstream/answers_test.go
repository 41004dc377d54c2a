package mockupstream

import (
	"bytes"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateAnswers = flag.Bool("update", false, "rewrite testdata/answers.golden from the mock's answers")

// TestAnswerBytes pins the bytes of every endpoint's answer, JSON and SSE,
// text and tool calls, and its errors, in each provider's shape: the wire
// shapes live in internal/schema, and a change there is a change of what
// the gateway's tests are served. go test -run AnswerBytes -update
// rewrites the golden; review the diff like code.
func TestAnswerBytes(t *testing.T) {
	var b strings.Builder
	for _, tools := range []bool{false, true} {
		var script map[string]string
		if tools {
			script = map[string]string{"f": `{"a":1}`, "ns.g": `{"b":2}`}
		}
		s := New(Options{Keys: testKeys(), ToolCalls: tools, ToolScript: script, Now: func() time.Time { return time.Unix(1764806400, 0) }})
		s.instance = 7 // response ids are otherwise random per mock
		for _, r := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`},
			{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`},
			{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/completions", `{"model":"m","prompt":"hi"}`},
			{"/v1/completions", `{"model":"m","prompt":"hi","stream":true}`},
			{"/v1/messages", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{}}]}`},
			{"/v1/messages", `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{}}]}`},
			{"/v1/messages", `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/responses", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}]}`},
			{"/v1/responses", `{"model":"m","input":"hi","stream":true,"tools":[{"type":"function","name":"f"}]}`},
			{"/v1/responses", `{"model":"m","input":"hi","max_output_tokens":3}`},
			{"/v1/responses", `{"model":"m","input":"hi","previous_response_id":"resp_x"}`},
			{"/v1/responses", `{"model":"m","input":"hi","stream":true,"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}]}`},
			{"/v1/responses", `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}]}`},
			{"/v1/embeddings", `{"model":"m","input":"hi"}`},
			{"/v1/chat/completions", `{"model":""}`},
		} {
			req := httptest.NewRequest("POST", r.path, strings.NewReader(r.body))
			req.Header.Set("Authorization", "Bearer "+keyA)
			req.Header.Set("Anthropic-Version", "2023-06-01")
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			fmt.Fprintf(&b, "== %v %s %s\n%d %s\n", tools, r.path, r.body, w.Code, w.Body.String())
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("POST", "/v1/messages", strings.NewReader(`{}`)))
		fmt.Fprintf(&b, "== noauth messages\n%d %s\n", w.Code, w.Body.String())
	}
	path := filepath.Join("testdata", "answers.golden")
	if *updateAnswers {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := []byte(b.String()); !bytes.Equal(got, want) {
		t.Errorf("the answers differ from %s (go test -run AnswerBytes -update, then review the diff):\n%s", path, got)
	}
}
