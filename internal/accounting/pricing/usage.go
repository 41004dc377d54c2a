package pricing

import "github.com/swarmgate/swarmgate/internal/accounting/usage"

// Usage is the provider-reported token usage of one request, the token
// fields of accounting/usage.Usage (FromUsage converts).
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
	// CacheWriteTokens are prompt tokens written to the provider's cache
	// (Anthropic's cache_creation_input_tokens), part of PromptTokens.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Tokens is what counts against a token-per-minute limit: prompt plus
// completion (TotalTokens when the provider reported only that).
func (u Usage) Tokens() int64 {
	if t := u.PromptTokens + u.CompletionTokens; t > 0 {
		return t
	}
	return u.TotalTokens
}

// FromUsage takes the token counts of a parsed provider usage. The
// provider's own cost figure is ignored: cost comes from the price table.
func FromUsage(u usage.Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens,
		CompletionTokens: u.CompletionTokens,
		TotalTokens:      u.TotalTokens,
		CachedTokens:     u.CachedTokens,
		ReasoningTokens:  u.ReasoningTokens,
		CacheWriteTokens: u.CacheWriteTokens,
	}
}
