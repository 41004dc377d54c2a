package mockupstream

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

func TestChatJSON(t *testing.T) {
	s := start(t, Options{Keys: testKeys()})
	resp, data, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hello world!", false, false), map[string]string{"X-Request-Id": "rid-1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Mock-Key-Id") != "a" || resp.Header.Get("X-Request-Id") != "rid-1" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	m := decode(t, data)
	if m["object"] != "chat.completion" || m["model"] != "gpt-4o-mini" {
		t.Fatalf("body %s", data)
	}
	choice := m["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	if choice["finish_reason"] != "stop" || msg["role"] != "assistant" || tokenText(0, 16) != msg["content"] {
		t.Fatalf("choice %v", choice)
	}
	u := m["usage"].(map[string]any)
	// "hello world!" is 12 bytes: ceil(12/4) = 3 prompt tokens.
	if u["prompt_tokens"] != 3.0 || u["completion_tokens"] != 16.0 || u["total_tokens"] != 19.0 {
		t.Fatalf("usage %v", u)
	}
	if _, ok := u["prompt_tokens_details"]; ok {
		t.Fatalf("details present although not configured: %v", u)
	}
	recs := s.Requests()
	if len(recs) != 1 {
		t.Fatalf("records %d", len(recs))
	}
	r := recs[0]
	if r.KeyID != "a" || r.KeyHash != KeyHash(keyA) || r.Model != "gpt-4o-mini" || r.Stream || r.Endpoint != "chat" ||
		r.Outcome != "ok" || r.Status != 200 || r.PromptTokens != 3 || r.CompletionTokens != 16 || r.Headers.Get("X-Request-Id") != "rid-1" {
		t.Fatalf("record %+v", r)
	}
	if r.Headers.Get("Authorization") != "" {
		t.Fatal("credential header recorded")
	}
}

func TestChatStream(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), TokensPerChunk: 3, CompletionTokens: 7})
	for _, includeUsage := range []bool{true, false} {
		t.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(t *testing.T) {
			resp, data, err := post(t, s, "/v1/chat/completions", keyA, chatBody("abcdefgh", true, includeUsage), nil)
			if err != nil {
				t.Fatal(err)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("content type %q", ct)
			}
			ev := sseEvents(t, data)
			// role, ceil(7/3)=3 content chunks, finish, [usage], [DONE]
			want := 6
			if includeUsage {
				want = 7
			}
			if len(ev) != want || ev[len(ev)-1] != "[DONE]" {
				t.Fatalf("%d events: %q", len(ev), ev)
			}
			var text strings.Builder
			for i, e := range ev[:len(ev)-1] {
				var c struct {
					Object  string `json:"object"`
					Choices []struct {
						Delta struct {
							Role    string  `json:"role"`
							Content *string `json:"content"`
						} `json:"delta"`
						FinishReason *string `json:"finish_reason"`
					} `json:"choices"`
					Usage json.RawMessage `json:"usage"`
				}
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Fatal(err)
				}
				if c.Object != "chat.completion.chunk" {
					t.Fatalf("object %q", c.Object)
				}
				hasUsage := strings.Contains(e, `"usage"`)
				if hasUsage != includeUsage {
					t.Fatalf("chunk %d usage field presence %v: %s", i, hasUsage, e)
				}
				last := includeUsage && i == len(ev)-2
				switch {
				case last:
					if len(c.Choices) != 0 || !strings.Contains(e, `"choices":[]`) {
						t.Fatalf("usage chunk must have empty choices: %s", e)
					}
					var u openai.Usage
					if err := json.Unmarshal(c.Usage, &u); err != nil || u.PromptTokens != 2 || u.CompletionTokens != 7 || u.TotalTokens != 9 {
						t.Fatalf("usage %s (%v)", c.Usage, err)
					}
				case includeUsage && string(c.Usage) != "null":
					t.Fatalf("chunk %d usage must be null: %s", i, e)
				case i == 0:
					if c.Choices[0].Delta.Role != "assistant" {
						t.Fatalf("first chunk %s", e)
					}
				default:
					if c.Choices[0].Delta.Content != nil {
						text.WriteString(*c.Choices[0].Delta.Content)
					}
					if fr := c.Choices[0].FinishReason; fr != nil && *fr != "stop" {
						t.Fatalf("finish %q", *fr)
					}
				}
			}
			if text.String() != tokenText(0, 7) {
				t.Fatalf("text %q", text.String())
			}
		})
	}
	recs := s.Requests()
	if !recs[0].Stream || !recs[0].IncludeUsage || recs[1].IncludeUsage || recs[0].Chunks != 6 || recs[1].Chunks != 5 {
		t.Fatalf("records %+v", recs)
	}
}

func TestCompletionsAndEmbeddingsAndModels(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), EmbeddingDims: 4, Models: []string{"m1", "m2"}})
	_, data, err := post(t, s, "/v1/completions", keyA, map[string]any{"model": "m1", "prompt": "12345678", "max_tokens": 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, data)
	if m["object"] != "text_completion" || m["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" ||
		m["usage"].(map[string]any)["completion_tokens"] != 5.0 || m["usage"].(map[string]any)["prompt_tokens"] != 2.0 {
		t.Fatalf("completion %s", data)
	}
	_, data, _ = post(t, s, "/v1/completions", keyA, map[string]any{"model": "m1", "prompt": "x", "stream": true, "stream_options": map[string]any{"include_usage": true}}, nil)
	ev := sseEvents(t, data)
	if ev[len(ev)-1] != "[DONE]" || !strings.Contains(ev[len(ev)-2], `"choices":[]`) || !strings.Contains(ev[0], `"text_completion"`) {
		t.Fatalf("completion stream %q", ev)
	}

	_, data, _ = post(t, s, "/v1/embeddings", keyB, map[string]any{"model": "m2", "input": []string{"abcd", "efgh"}}, nil)
	var el embeddingList
	if err := json.Unmarshal(data, &el); err != nil {
		t.Fatal(err)
	}
	if len(el.Data) != 2 || el.Usage.PromptTokens != 2 || len(el.Data[0].Embedding.([]any)) != 4 {
		t.Fatalf("embeddings %s", data)
	}
	_, again, _ := post(t, s, "/v1/embeddings", keyB, map[string]any{"model": "m2", "input": []string{"abcd", "efgh"}}, nil)
	if string(again) != string(data) {
		t.Fatal("embeddings are not deterministic")
	}
	_, data, _ = post(t, s, "/v1/embeddings", keyB, map[string]any{"model": "m2", "input": "abcd", "encoding_format": "base64", "dimensions": 3}, nil)
	if err := json.Unmarshal(data, &el); err != nil || len(el.Data) != 1 {
		t.Fatalf("base64 embeddings %s", data)
	}
	if str, ok := el.Data[0].Embedding.(string); !ok || len(str) != 16 { // 12 bytes base64
		t.Fatalf("base64 embedding %v", el.Data[0].Embedding)
	}

	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, s.URL()+"/openai/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ml modelList
	_ = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if len(ml.Data) != 2 || ml.Data[1].ID != "m2" || ml.Object != "list" {
		t.Fatalf("models %+v", ml)
	}
}

func TestPathsAndBadRequests(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), Models: []string{"known"}, StrictModels: true})
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"relay prefix", "/openai/v1/chat/completions", map[string]any{"model": "known", "messages": []any{}}, 200, ""},
		{"deep prefix", "/api/x/v1/chat/completions/", map[string]any{"model": "known"}, 200, ""},
		{"unknown path", "/v1/audio/speech", map[string]any{"model": "known"}, 404, "unknown_url"},
		{"unknown model", "/v1/chat/completions", map[string]any{"model": "nope"}, 404, "model_not_found"},
		{"no model", "/v1/chat/completions", map[string]any{}, 400, "missing_model"},
		{"bad json", "/v1/chat/completions", "{", 400, "invalid_json"},
		{"stream embeddings", "/v1/embeddings", map[string]any{"model": "known", "input": "x", "stream": true}, 400, "invalid_value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, data, err := post(t, s, tc.path, keyA, tc.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			if tc.code != "" {
				var e openai.ErrorBody
				if err := json.Unmarshal(data, &e); err != nil || e.Error.Code == nil || *e.Error.Code != tc.code || e.Error.Message == "" {
					t.Fatalf("error body %s", data)
				}
			}
		})
	}
}

func TestAuthStyles(t *testing.T) {
	cases := []struct {
		style  config.AuthStyle
		header string
		value  string
		status int
	}{
		{config.AuthBearer, "Authorization", "Bearer " + keyA, 200},
		{config.AuthBearer, "Authorization", "bearer " + keyA, 200},
		{config.AuthBearer, "X-Api-Key", keyA, 401},
		{config.AuthBearer, "Authorization", "Bearer sk-unknown", 401},
		{config.AuthXAPIKey, "X-Api-Key", keyA, 200},
		{config.AuthXAPIKey, "Authorization", "Bearer " + keyA, 401},
		{config.AuthAPIKey, "Api-Key", keyB, 200},
		{config.AuthAPIKey, "X-Api-Key", keyB, 401},
		{config.AuthAPIKey, "", "", 401},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s", tc.style, tc.header), func(t *testing.T) {
			logs := &logbuf.Buffer{}
			s := start(t, Options{Auth: tc.style, Keys: testKeys(), Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			hdr := map[string]string{}
			if tc.header != "" {
				hdr[tc.header] = tc.value
			}
			resp, data, err := post(t, s, "/v1/chat/completions", "", chatBody("hi", false, false), hdr)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			if tc.status == 401 {
				var e openai.ErrorBody
				if err := json.Unmarshal(data, &e); err != nil || e.Error.Type != "invalid_request_error" || *e.Error.Code != "invalid_api_key" {
					t.Fatalf("401 body %s", data)
				}
				if c := s.Count(""); c.Unauthorized != 1 {
					t.Fatalf("unauthorized count %+v", c)
				}
			}
			for _, secret := range []string{keyA, keyB, "sk-unknown"} {
				if strings.Contains(string(data), secret) || strings.Contains(logs.String(), secret) ||
					strings.Contains(fmt.Sprintf("%+v", s.Requests()), secret) {
					t.Fatalf("a key value leaked into the answer, logs or records")
				}
			}
		})
	}
}

func TestAnyKeyWhenNoKeysConfigured(t *testing.T) {
	s := start(t, Options{})
	resp, _, err := post(t, s, "/v1/chat/completions", "whatever", chatBody("hi", false, false), nil)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Mock-Key-Id") != "any" {
		t.Fatalf("%v %v", err, resp)
	}
	resp, _, _ = post(t, s, "/v1/chat/completions", "", chatBody("hi", false, false), nil)
	if resp.StatusCode != 401 {
		t.Fatalf("missing key: %d", resp.StatusCode)
	}
}

func TestUsageKnobs(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 10, CachedTokens: 2, ReasoningTokens: 4})
	cases := []struct {
		name                      string
		maxTokens                 int
		hdr                       map[string]string
		completion, cached, reas  int
		finish                    string
		contentTokens, promptToks int
	}{
		{"defaults", 0, nil, 10, 2, 4, "stop", 6, 5},
		{"max_tokens below default", 3, nil, 3, 2, 3, "length", 0, 5},
		{"max_tokens above default", 50, nil, 10, 2, 4, "stop", 6, 5},
		{"header", 3, map[string]string{"X-Mock-Completion-Tokens": "20", "X-Mock-Reasoning-Tokens": "0", "X-Mock-Cached-Tokens": "99"}, 20, 5, 0, "stop", 20, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := chatBody("12345678901234567", false, false) // 17 bytes: 5 tokens
			if tc.maxTokens > 0 {
				body["max_completion_tokens"] = tc.maxTokens
			}
			_, data, err := post(t, s, "/v1/chat/completions", keyA, body, tc.hdr)
			if err != nil {
				t.Fatal(err)
			}
			var c struct {
				Choices []struct {
					Message      struct{ Content string }
					FinishReason string `json:"finish_reason"`
				}
				Usage openai.Usage
			}
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatal(err)
			}
			u := c.Usage
			cached, reas := 0, 0
			if u.PromptTokensDetails != nil {
				cached = int(u.PromptTokensDetails.CachedTokens)
			}
			if u.CompletionTokensDetails != nil {
				reas = int(u.CompletionTokensDetails.ReasoningTokens)
			}
			if int(u.PromptTokens) != tc.promptToks || int(u.CompletionTokens) != tc.completion || cached != tc.cached || reas != tc.reas ||
				c.Choices[0].FinishReason != tc.finish || c.Choices[0].Message.Content != tokenText(0, tc.contentTokens) {
				t.Fatalf("got %s", data)
			}
		})
	}
}

func TestPromptTokenFormula(t *testing.T) {
	s := New(Options{})
	cases := []struct {
		body string
		want int
	}{
		{`{"messages":[{"role":"user","content":"abcd"}]}`, 1},
		{`{"messages":[{"role":"user","content":"abcde"}]}`, 2},
		{`{"messages":[{"role":"system","content":"abcd"},{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 2},
		{`{"prompt":["abcd","abcd","abcd"]}`, 3},
		{`{"prompt":[1,2,3,4,5]}`, 5},
		{`{"input":""}`, 1},
	}
	for _, tc := range cases {
		var q apiRequest
		if err := json.Unmarshal([]byte(tc.body), &q); err != nil {
			t.Fatal(err)
		}
		if got := s.usageFor("chat", &q, http.Header{}).prompt; got != tc.want {
			t.Errorf("%s: prompt tokens %d, want %d", tc.body, got, tc.want)
		}
	}
}

func TestRecordsAreCopies(t *testing.T) {
	s := start(t, Options{Keys: testKeys()})
	_, _, _ = post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), map[string]string{"X-Swarmgate-Tenant": "spoof"})
	r := s.Requests()
	if r[0].Headers.Get("X-Swarmgate-Tenant") != "spoof" {
		t.Fatalf("x-swarmgate-* headers must be recorded (to assert they are stripped): %v", r[0].Headers)
	}
	r[0].Headers.Set("X-Swarmgate-Tenant", "changed")
	r[0].Model = "changed"
	if again := s.Requests(); !reflect.DeepEqual(again[0].Headers.Get("X-Swarmgate-Tenant"), "spoof") || again[0].Model != "gpt-4o-mini" {
		t.Fatal("Requests returned shared state")
	}
	s.ResetRecords()
	if len(s.Requests()) != 0 || s.Total().Requests != 0 {
		t.Fatal("ResetRecords")
	}
}

func TestDelays(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), TTFT: 60 * time.Millisecond, InterTokenDelay: 10 * time.Millisecond, CompletionTokens: 5})
	begin := time.Now()
	_, data, err := post(t, s, "/v1/chat/completions", keyA, chatBody("hi", true, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	// TTFT + 6 more chunks (5 content, finish) at 10ms.
	if el := time.Since(begin); el < 110*time.Millisecond {
		t.Fatalf("stream took %v, want >= 110ms", el)
	}
	if ev := sseEvents(t, data); len(ev) != 8 {
		t.Fatalf("events %d", len(ev))
	}
	begin = time.Now()
	_, _, _ = post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
	if el := time.Since(begin); el < 100*time.Millisecond {
		t.Fatalf("JSON took %v, want >= 100ms (TTFT + 4 inter-token delays)", el)
	}
}

func TestMaxRecordsKeepsCounting(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), MaxRecords: 3})
	for range 5 {
		_, _, _ = post(t, s, "/v1/chat/completions", keyA, chatBody("hi", false, false), nil)
	}
	_, _, _ = post(t, s, "/v1/chat/completions", "sk-nope", chatBody("hi", false, false), nil)
	if n := len(s.Requests()); n != 3 {
		t.Fatalf("kept %d records", n)
	}
	if c := s.Count("a"); c.Requests != 5 || c.OK != 5 {
		t.Fatalf("counters %+v", c)
	}
	if tot := s.Total(); tot.Requests != 6 || tot.Unauthorized != 1 {
		t.Fatalf("total %+v", tot)
	}
}
