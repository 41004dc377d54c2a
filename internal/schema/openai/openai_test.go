package openai

import (
	"encoding/json"
	"testing"
)

// TestEncoding pins what a zero or partly set value looks like on the
// wire: which fields are stated as null and which are left out.
func TestEncoding(t *testing.T) {
	text := "hi"
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"usage without details", Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7},
			`{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}`},
		{"usage with cached tokens", Usage{PromptTokens: 3, PromptTokensDetails: &PromptTokensDetails{CachedTokens: 2}},
			`{"prompt_tokens":3,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":0}}`},
		{"first delta of a tool-call stream", &ChatMessage{Role: "assistant"},
			`{"role":"assistant","content":null,"refusal":null}`},
		{"text delta", &ChatDelta{Content: &text}, `{"content":"hi"}`},
		{"finish delta", &ChatDelta{}, `{}`},
		{"tool call delta", &ChatDelta{ToolCalls: []ToolCallDelta{{Index: 1, Function: FunctionDelta{Arguments: "{"}}}},
			`{"tool_calls":[{"index":1,"function":{"arguments":"{"}}]}`},
		{"chunk without usage", ChatCompletion{ID: "c", Object: "chat.completion.chunk", Choices: []ChatChoice{}},
			`{"id":"c","object":"chat.completion.chunk","created":0,"model":"","system_fingerprint":"","choices":[]}`},
		{"error", ErrorBody{Error: ErrorDetail{Message: "m", Type: "t"}},
			`{"error":{"message":"m","type":"t","param":null,"code":null}}`},
		{"function call item outside a namespace", FunctionCallItem{Type: "function_call", Name: "f"},
			`{"type":"function_call","id":"","call_id":"","name":"f","arguments":"","status":""}`},
		{"request tool without schema", ChatTool{Type: "function", Function: FunctionTool{Name: "f"}},
			`{"type":"function","function":{"name":"f"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}

func TestUsageDetails(t *testing.T) {
	tests := []struct {
		body              string
		cached, reasoning int64
	}{
		{`{"prompt_tokens":5}`, 0, 0},
		{`{"prompt_tokens_details":null,"completion_tokens_details":null}`, 0, 0},
		{`{"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":2}}`, 3, 2},
	}
	for _, tt := range tests {
		var u Usage
		if err := json.Unmarshal([]byte(tt.body), &u); err != nil {
			t.Fatal(err)
		}
		if u.CachedTokens() != tt.cached || u.ReasoningTokens() != tt.reasoning {
			t.Errorf("%s: cached %d reasoning %d", tt.body, u.CachedTokens(), u.ReasoningTokens())
		}
	}
}
