// Package openai is the wire shape of OpenAI's chat completions
// (POST /v1/chat/completions) and Responses (POST /v1/responses) APIs: the
// objects of an answer, stream chunks, usage and the error body, as the
// translators and the mock provider write and read them. See package
// schema for the rules on field order.
package openai

import "encoding/json"

// Usage is a chat completion's token counts. PromptTokens includes the
// cached ones (PromptTokensDetails.CachedTokens); CompletionTokens
// includes the reasoning ones.
type Usage struct {
	PromptTokens            int64                    `json:"prompt_tokens"`
	CompletionTokens        int64                    `json:"completion_tokens"`
	TotalTokens             int64                    `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails break the prompt tokens down.
type PromptTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
	AudioTokens  int64 `json:"audio_tokens"`
}

// CompletionTokensDetails break the completion tokens down.
type CompletionTokensDetails struct {
	ReasoningTokens          int64 `json:"reasoning_tokens"`
	AudioTokens              int64 `json:"audio_tokens"`
	AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
}

// CachedTokens is the prompt tokens read from the cache, 0 when not
// stated.
func (u *Usage) CachedTokens() int64 {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// ReasoningTokens is the completion tokens spent on reasoning, 0 when not
// stated.
func (u *Usage) ReasoningTokens() int64 {
	if u.CompletionTokensDetails == nil {
		return 0
	}
	return u.CompletionTokensDetails.ReasoningTokens
}

// ChatCompletion is a chat completion answer (object "chat.completion")
// or one chunk of its stream ("chat.completion.chunk").
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	// Usage is null on stream chunks when include_usage is set, absent
	// when it is not, a *Usage on the final chunk and on JSON answers.
	Usage any `json:"usage,omitempty"`
}

// ChatChoice is one choice: Message on an answer, Delta on a chunk (a
// *ChatMessage or *ChatDelta).
type ChatChoice struct {
	Index        int       `json:"index"`
	Message      any       `json:"message,omitempty"`
	Delta        any       `json:"delta,omitempty"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatMessage is an assistant message that states every field: content
// and refusal null when empty, as OpenAI writes a tool-calling answer and
// a stream's first delta.
type ChatMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatDelta is a stream chunk's delta, each field only when set (also a
// text answer's message, which states no refusal).
type ChatDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	Refusal   *string         `json:"refusal,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCall is a function call of an answer or of a request's assistant
// turn.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is a called function and its arguments (JSON text).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is a stream's piece of the tool call at Index: id, type
// and name on its first chunk, argument pieces on the next ones.
type ToolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function FunctionDelta `json:"function"`
}

// FunctionDelta is a piece of a function call.
type FunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// StreamOptions is a streaming request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatRequest is a chat completions request as a translator writes it, in
// the order its fields are written; numbers the client sent are copied as
// written (json.RawMessage).
type ChatRequest struct {
	Model             string               `json:"model"`
	Messages          []ChatRequestMessage `json:"messages"`
	Tools             []ChatTool           `json:"tools,omitempty"`
	ToolChoice        any                  `json:"tool_choice,omitempty"` // "auto", "required", "none" or a ToolChoiceFunction
	ParallelToolCalls *bool                `json:"parallel_tool_calls,omitempty"`
	MaxTokens         json.RawMessage      `json:"max_tokens,omitempty"`
	MaxCompletion     json.RawMessage      `json:"max_completion_tokens,omitempty"`
	Stop              []string             `json:"stop,omitempty"`
	Temperature       json.RawMessage      `json:"temperature,omitempty"`
	TopP              json.RawMessage      `json:"top_p,omitempty"`
	User              *string              `json:"user,omitempty"`
	Stream            bool                 `json:"stream,omitempty"`
	StreamOptions     *StreamOptions       `json:"stream_options,omitempty"`
}

// ChatRequestMessage is one message of a request.
type ChatRequestMessage struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"` // a string, []ContentPart or nil
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ContentPart is one part of a message's content: text, image_url, or
// an assistant message's refusal.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	Refusal  string    `json:"refusal,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL is an image part's URL (http(s) or a data URL).
type ImageURL struct {
	URL string `json:"url"`
}

// ChatTool is a function tool of a request.
type ChatTool struct {
	Type     string       `json:"type"` // "function"
	Function FunctionTool `json:"function"`
}

// FunctionTool is a function the model may call; Parameters is its JSON
// Schema as the client wrote it.
type FunctionTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      json.RawMessage `json:"strict,omitempty"`
}

// ToolChoiceFunction forces a call of the named function.
type ToolChoiceFunction struct {
	Type     string       `json:"type"` // "function"
	Function FunctionName `json:"function"`
}

// FunctionName names a function.
type FunctionName struct {
	Name string `json:"name"`
}

// TextCompletion is a legacy completions answer (POST /v1/completions,
// object "text_completion") or one chunk of its stream.
type TextCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []TextChoice `json:"choices"`
	Usage             any          `json:"usage,omitempty"`
}

// TextChoice is one choice of a legacy completion.
type TextChoice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}
