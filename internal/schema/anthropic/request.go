package anthropic

import "encoding/json"

// Request is a Messages request as a translator writes it: only the
// fields it sets, zero values left out where the API treats absence as
// the default.
type Request struct {
	Model         string         `json:"model"`
	System        string         `json:"system,omitempty"`
	Messages      []MessageParam `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	StopSequences []string       `json:"stop_sequences,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	Metadata      *Metadata      `json:"metadata,omitempty"`
	Tools         []Tool         `json:"tools,omitempty"`
	ToolChoice    *ToolChoice    `json:"tool_choice,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
}

// Metadata names the end user (metadata.user_id).
type Metadata struct {
	UserID string `json:"user_id"`
}

// MessageParam is one turn of the conversation.
type MessageParam struct {
	Role    string         `json:"role"` // "user" or "assistant"
	Content []ContentBlock `json:"content"`
}

// ContentBlock is one content block of a request: text, image, tool_use
// or tool_result; only the fields of its type are set.
type ContentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *ImageSource    `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// Content is a tool_result's: a string or text blocks.
	Content any `json:"content,omitempty"`
}

// ImageSource is an image block's source: base64 data or a URL.
type ImageSource struct {
	Type      string `json:"type"` // "base64" or "url"
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Tool is a client tool the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolChoice is how the model may use the tools: auto, any, tool (Name)
// or none.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}
