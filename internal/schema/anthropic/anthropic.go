// Package anthropic is the wire shape of Anthropic's Messages API
// (POST /v1/messages): the request a translator writes for an Anthropic
// backend, the message object and content blocks of an answer, usage and
// the error body. See package schema for the rules on field order.
package anthropic

import "encoding/json"

// Usage is a message's token counts. InputTokens counts only the prompt
// tokens neither read from nor written to the cache; the prompt is the
// sum of the three input counts.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// Message is the message object of an answer (and of a stream's
// message_start, with no content, a null stop_reason and the usage so
// far).
type Message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"` // "message"
	Role         string  `json:"role"` // "assistant"
	Model        string  `json:"model"`
	Content      []any   `json:"content"` // TextBlock, ToolUseBlock
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        Usage   `json:"usage"`
}

// TextBlock is an answer's text content block.
type TextBlock struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// ToolUseBlock is an answer's tool call.
type ToolUseBlock struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"` // a JSON object
}

// ErrorBody is an error answer: {"type":"error","error":{...}}.
type ErrorBody struct {
	Type  string      `json:"type"` // "error"
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error's class (invalid_request_error,
// rate_limit_error, overloaded_error, ...) and text.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
