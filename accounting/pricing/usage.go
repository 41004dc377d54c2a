package pricing

// Usage is the provider-reported token usage of one request. Its fields are
// those of accounting/usage.Usage in the same order, so a usage.Usage
// converts with a plain type conversion: pricing.Usage(u).
//
// OpenAI semantics: PromptTokens includes CachedTokens
// (prompt_tokens_details.cached_tokens) and CompletionTokens includes
// ReasoningTokens (completion_tokens_details.reasoning_tokens).
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
}

// Tokens is what counts against a token-per-minute limit: prompt plus
// completion (TotalTokens when the provider reported only that).
func (u Usage) Tokens() int64 {
	if t := u.PromptTokens + u.CompletionTokens; t > 0 {
		return t
	}
	return u.TotalTokens
}
