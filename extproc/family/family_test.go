package family

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestForPath(t *testing.T) {
	for _, tc := range []struct {
		path  string
		name  string
		shape ErrorShape
		nilOK bool
	}{
		{"/v1/chat/completions", "chat_completions", OpenAI, false},
		{"/v1/responses", "responses", OpenAI, false},
		{"/v1/messages", "anthropic_messages", Anthropic, false},
		{"/v1/messages/count_tokens", "anthropic_messages", Anthropic, false},
		{"/v1/models/gpt-4o", "", OpenAI, false},
		{"/v1/messages/batches", "", Anthropic, true},
		{"/v2/nothing", "", OpenAI, true},
	} {
		s := ForPath(tc.path)
		if (s == nil) != tc.nilOK || (s != nil && s.Name != tc.name) {
			t.Errorf("ForPath(%q) = %+v", tc.path, s)
		}
		if sh := ShapeForPath(tc.path); sh != tc.shape {
			t.Errorf("ShapeForPath(%q) = %v, want %v", tc.path, sh, tc.shape)
		}
	}
	if CountTokens.Billed || !Messages.Billed {
		t.Error("count_tokens must not be billed, messages must")
	}
}

func TestRenderAnthropic(t *testing.T) {
	for _, tc := range []struct {
		in     Error
		status int
		typ    string
	}{
		{Error{Status: 401, Code: "invalid_api_key"}, 401, "authentication_error"},
		{Error{Status: 429, Code: "budget_exceeded"}, 402, "billing_error"},
		{Error{Status: 429, Code: "upstream_keys_exhausted"}, 429, "rate_limit_error"},
		{Error{Status: 503, Code: "upstream_keys_exhausted"}, 529, "overloaded_error"},
		{Error{Status: 400, Code: "context_length_exceeded"}, 400, "invalid_request_error"},
		{Error{Status: 404, Code: "unknown_url"}, 404, "not_found_error"},
		{Error{Status: 413}, 413, "request_too_large"},
		{Error{Status: 504}, 504, "timeout_error"},
		{Error{Status: 500}, 500, "api_error"},
	} {
		tc.in.Message = "m \"q\"\n"
		st, b := Anthropic.Render(&tc.in)
		var got struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if st != tc.status || got.Type != "error" || got.Error.Type != tc.typ || got.Error.Message != tc.in.Message {
			t.Errorf("Render(%+v) = %d %s, want %d %s", tc.in, st, b, tc.status, tc.typ)
		}
	}
	st, b := OpenAI.Render(&Error{Status: http.StatusTooManyRequests, Message: "x", Type: "tokens", Code: "rate_limit_exceeded"})
	if st != 429 || string(b) != `{"error":{"message":"x","type":"tokens","param":null,"code":"rate_limit_exceeded"}}` {
		t.Errorf("OpenAI.Render = %d %s", st, b)
	}
}

func TestModelListShapes(t *testing.T) {
	items := Anthropic.AppendModel(nil, "claude")
	var a struct {
		Data    []struct{ Type, ID string }
		HasMore bool   `json:"has_more"`
		FirstID string `json:"first_id"`
	}
	if err := json.Unmarshal(Anthropic.AppendList(nil, items, "claude", "claude"), &a); err != nil || len(a.Data) != 1 || a.Data[0].ID != "claude" ||
		a.Data[0].Type != "model" || a.FirstID != "claude" {
		t.Errorf("anthropic list: %+v %v", a, err)
	}
	var o struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.Unmarshal(OpenAI.AppendList(nil, OpenAI.AppendModel(nil, "m"), "m", "m"), &o); err != nil || o.Object != "list" || o.Data[0].ID != "m" {
		t.Errorf("openai list: %+v %v", o, err)
	}
}

// Each family names its GenAI span by the API the client speaks: Anthropic
// Messages are Anthropic's chat, not OpenAI's.
func TestSpecsNameTheirSpans(t *testing.T) {
	tests := []struct{ path, provider, op string }{
		{"/v1/chat/completions", "openai", "chat"},
		{"/v1/completions", "openai", "text_completion"},
		{"/v1/embeddings", "openai", "embeddings"},
		{"/v1/responses", "openai", "chat"},
		{"/v1/messages", "anthropic", "chat"},
		{"/v1/messages/count_tokens", "anthropic", "count_tokens"},
	}
	for _, tc := range tests {
		s := ForPath(tc.path)
		if s == nil || s.Provider != tc.provider || s.Operation != tc.op {
			t.Errorf("%s: %+v, want %s %s", tc.path, s, tc.provider, tc.op)
		}
	}
}

// TestRenderInvalidUTF8: a refusal quoting client bytes (a path, a model
// name) is valid JSON in both shapes, whatever the bytes.
func TestRenderInvalidUTF8(t *testing.T) {
	e := &Error{Status: 404, Message: "Unknown request URL: POST /v1/\xff\xfe\u2028", Type: "invalid_request_error", Code: "unknown_url", Param: "x\x00"}
	for _, sh := range []ErrorShape{OpenAI, Anthropic} {
		if _, b := sh.Render(e); !json.Valid(b) {
			t.Errorf("shape %d: invalid JSON %q", sh, b)
		}
	}
}
