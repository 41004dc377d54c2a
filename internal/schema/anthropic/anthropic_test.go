package anthropic

import (
	"encoding/json"
	"testing"
)

// TestEncoding pins what a zero or partly set value looks like on the
// wire: which fields are stated as null and which are left out.
func TestEncoding(t *testing.T) {
	stop := "end_turn"
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"message_start's message", Message{ID: "msg_1", Type: "message", Role: "assistant", Model: "m", Content: []any{}},
			`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
		{"answer", Message{Content: []any{TextBlock{Type: "text", Text: "hi"}, ToolUseBlock{Type: "tool_use", ID: "t", Name: "f", Input: json.RawMessage(`{}`)}}, StopReason: &stop},
			`{"id":"","type":"","role":"","model":"","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
		{"error", ErrorBody{Type: "error", Error: ErrorDetail{Type: "overloaded_error", Message: "Overloaded"}},
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{"minimal request", Request{Model: "m", Messages: []MessageParam{}, MaxTokens: 1},
			`{"model":"m","messages":[],"max_tokens":1}`},
		{"tool_result block", ContentBlock{Type: "tool_result", ToolUseID: "t", Content: "ok"},
			`{"type":"tool_result","tool_use_id":"t","content":"ok"}`},
		{"tool choice", ToolChoice{Type: "auto"}, `{"type":"auto"}`},
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
