package openai

// Response is the Responses API's response object, as the mock provider
// writes it.
type Response struct {
	ID                 string             `json:"id"`
	AccessPrograms     AccessPrograms     `json:"access_programs"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Error              *struct{}          `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"` // OutputMessage, FunctionCallItem
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Tools              []struct{}         `json:"tools"`
	ToolChoice         string             `json:"tool_choice"`
	Usage              *ResponseUsage     `json:"usage"`
}

// AccessPrograms are the domain-specific access programs a response was
// served under (cyber: standard, daybreak_blue, daybreak_red).
type AccessPrograms struct {
	Cyber string `json:"cyber"`
}

// IncompleteDetails says why a response is incomplete
// (max_output_tokens, content_filter).
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// OutputMessage is an assistant message output item.
type OutputMessage struct {
	Type    string       `json:"type"` // "message"
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []OutputText `json:"content"`
}

// OutputText is a message's output_text part.
type OutputText struct {
	Type        string     `json:"type"` // "output_text"
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
}

// FunctionCallItem is a function_call output item; Namespace is set for a
// tool of a namespace.
type FunctionCallItem struct {
	Type      string `json:"type"` // "function_call"
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// ResponseUsage is a response's token counts: input includes the cached
// tokens, output the reasoning ones.
type ResponseUsage struct {
	InputTokens         int64               `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int64               `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int64               `json:"total_tokens"`
}

// InputTokensDetails break the input tokens down.
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// OutputTokensDetails break the output tokens down.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}
