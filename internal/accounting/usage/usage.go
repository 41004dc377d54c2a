// Package usage reads token usage from LLM responses: whole JSON bodies
// (FromJSON), server-sent event streams fed chunk by chunk (StreamParser),
// the removal of the usage-only chunk the gateway asked for on the client's
// behalf (StreamFilter), and gzip-encoded bodies decoded incrementally
// (GzipStream). It has no gRPC or Envoy types.
package usage

// Usage is token usage normalised to OpenAI's meaning: PromptTokens include
// cached prompt tokens, CompletionTokens include reasoning tokens. It is the
// one usage type of the gateway: the parsers fill it, pricing prices it, the
// ledger records it (the JSON names are the ledger's) and ext_proc passes it
// through.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`     // provider's total, else prompt + completion
	CachedTokens     int64 `json:"cached_tokens"`    // prompt tokens served from the provider's cache
	ReasoningTokens  int64 `json:"reasoning_tokens"` // completion tokens spent on hidden reasoning
	// CacheWriteTokens are prompt tokens written to the provider's cache
	// (Anthropic's cache_creation_input_tokens), priced apart; they are
	// part of PromptTokens.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// Cost is what the provider says the call cost (OpenRouter's usage.cost,
	// in its credits, i.e. USD); 0 when not reported. It is informational:
	// the gateway bills from its price table, and the ledger does not
	// record it.
	Cost float64 `json:"-"`
}

// parseUsage reads a usage object at s.i. Accepted spellings:
//   - OpenAI chat/completions/embeddings: prompt_tokens, completion_tokens,
//     total_tokens, prompt_tokens_details.cached_tokens,
//     completion_tokens_details.reasoning_tokens;
//   - OpenAI responses API and relays copying it: input_tokens,
//     output_tokens, input_tokens_details.cached_tokens,
//     output_tokens_details.reasoning_tokens;
//   - DeepSeek: prompt_cache_hit_tokens;
//   - Anthropic-shaped relays: cache_read_input_tokens and
//     cache_creation_input_tokens, which Anthropic does not include in
//     input_tokens, so they are added to PromptTokens;
//   - OpenRouter: cost.
//
// ok is false when the object has no token count at all.
func parseUsage(s *jscan) (Usage, bool) {
	u, _, ok := parseUsageInput(s)
	return u, ok
}

// parseUsageInput is parseUsage that also tells whether the object counted
// prompt tokens at all: Anthropic's message_delta may carry only the
// cumulative output_tokens, and the prompt of its message_start stands.
func parseUsageInput(s *jscan) (Usage, bool, bool) {
	var (
		u                                   Usage
		prompt, input, compl, output, total int64 = -1, -1, -1, -1, -1
		cached, hit, cacheRead, cacheCreate int64
		reasoning                           int64
	)
	num := func() int64 {
		_, n, ok := s.number()
		if !ok {
			return -1
		}
		if n < 0 {
			return 0
		}
		return n
	}
	details := func(field string, dst *int64) {
		if s.peek() != '{' {
			s.skip()
			return
		}
		s.object(func(k []byte) {
			if string(k) == field {
				if v := num(); v > *dst {
					*dst = v
				}
				return
			}
			s.skip()
		})
	}
	s.object(func(k []byte) {
		switch string(k) {
		case "prompt_tokens":
			prompt = num()
		case "input_tokens":
			input = num()
		case "completion_tokens":
			compl = num()
		case "output_tokens":
			output = num()
		case "total_tokens":
			total = num()
		case "prompt_tokens_details", "input_tokens_details":
			details("cached_tokens", &cached)
		case "completion_tokens_details", "output_tokens_details":
			details("reasoning_tokens", &reasoning)
		case "prompt_cache_hit_tokens":
			hit = max(num(), 0)
		case "cache_read_input_tokens":
			cacheRead = max(num(), 0)
		case "cache_creation_input_tokens":
			cacheCreate = max(num(), 0)
		case "cost":
			if f, _, ok := s.number(); ok && f > 0 {
				u.Cost = f
			}
		default:
			s.skip()
		}
	})
	if s.bad || (prompt < 0 && input < 0 && compl < 0 && output < 0 && total < 0) {
		return Usage{}, false, false
	}
	switch {
	case prompt >= 0:
		u.PromptTokens = prompt
	case input >= 0:
		u.PromptTokens = input + cacheRead + cacheCreate
	}
	switch {
	case compl >= 0:
		u.CompletionTokens = compl
	case output >= 0:
		u.CompletionTokens = output
	}
	u.CachedTokens = max(cached, hit, cacheRead)
	u.ReasoningTokens = reasoning
	if prompt < 0 && input >= 0 {
		u.CacheWriteTokens = cacheCreate
	}
	if total >= 0 {
		u.TotalTokens = total
	} else {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u, prompt >= 0 || input >= 0, true
}

// Tokens is what counts against a token-per-minute limit: prompt plus
// completion (TotalTokens when the provider reported only that).
func (u Usage) Tokens() int64 {
	if t := u.PromptTokens + u.CompletionTokens; t > 0 {
		return t
	}
	return u.TotalTokens
}
