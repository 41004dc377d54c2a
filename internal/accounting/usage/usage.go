// Package usage reads token usage from LLM responses: whole JSON bodies
// (FromJSON), server-sent event streams fed chunk by chunk (StreamParser),
// the removal of the usage-only chunk the gateway asked for on the client's
// behalf (StreamFilter), and gzip-encoded bodies decoded incrementally
// (GzipStream). It has no gRPC or Envoy types.
package usage

import (
	"bytes"
	"strconv"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

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

// parseUsage reads a usage object at the scanner's position. Accepted
// spellings:
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
func parseUsage(s *jsonscan.Scanner) (u Usage, ok bool, err error) {
	u, _, ok, err = parseUsageInput(s)
	return u, ok, err
}

// parseUsageInput is parseUsage that also tells whether the object counted
// prompt tokens at all: Anthropic's message_delta may carry only the
// cumulative output_tokens, and the prompt of its message_start stands.
func parseUsageInput(s *jsonscan.Scanner) (u Usage, hasInput, ok bool, err error) {
	f := usageFields{prompt: -1, input: -1, compl: -1, output: -1, total: -1}
	err = s.Object(func(k []byte, esc bool) error { return f.member(s, k, esc) })
	if err != nil || !f.counted() {
		return Usage{}, false, false, err
	}
	return f.usage(), f.prompt >= 0 || f.input >= 0, true, nil
}

// usageFields are the counts of one usage object as spelled; -1: absent.
type usageFields struct {
	prompt, input, compl, output, total int64
	cached, hit, cacheRead, cacheCreate int64
	reasoning                           int64
	cost                                float64
}

func (f *usageFields) member(s *jsonscan.Scanner, k []byte, esc bool) error {
	if esc { // buf only then: zeroing it costs
		var buf [jsonscan.MaxKey]byte
		k = jsonscan.DecodeKey(&buf, k)
	}
	var dst *int64
	switch string(k) {
	case "prompt_tokens":
		dst = &f.prompt
	case "input_tokens":
		dst = &f.input
	case "completion_tokens":
		dst = &f.compl
	case "output_tokens":
		dst = &f.output
	case "total_tokens":
		dst = &f.total
	case "prompt_tokens_details", "input_tokens_details":
		return details(s, "cached_tokens", &f.cached)
	case "completion_tokens_details", "output_tokens_details":
		return details(s, "reasoning_tokens", &f.reasoning)
	case "prompt_cache_hit_tokens":
		return count(s, &f.hit, 0)
	case "cache_read_input_tokens":
		return count(s, &f.cacheRead, 0)
	case "cache_creation_input_tokens":
		return count(s, &f.cacheCreate, 0)
	case "cost":
		v, _, ok, err := number(s)
		if ok && v > 0 {
			f.cost = v
		}
		return err
	default:
		return s.Skip()
	}
	return count(s, dst, -1)
}

func (f *usageFields) counted() bool {
	return f.prompt >= 0 || f.input >= 0 || f.compl >= 0 || f.output >= 0 || f.total >= 0
}

// usage normalises the counts to OpenAI's meaning.
func (f *usageFields) usage() Usage {
	u := Usage{Cost: f.cost, ReasoningTokens: f.reasoning, CachedTokens: max(f.cached, f.hit, f.cacheRead)}
	switch {
	case f.prompt >= 0:
		u.PromptTokens = f.prompt
	case f.input >= 0:
		u.PromptTokens = f.input + f.cacheRead + f.cacheCreate
		u.CacheWriteTokens = f.cacheCreate
	}
	switch {
	case f.compl >= 0:
		u.CompletionTokens = f.compl
	case f.output >= 0:
		u.CompletionTokens = f.output
	}
	if f.total >= 0 {
		u.TotalTokens = f.total
	} else {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u
}

// count reads a token count into *dst: a negative number counts 0, null
// or a non-number is absent (*dst = absent).
func count(s *jsonscan.Scanner, dst *int64, absent int64) error {
	_, n, ok, err := number(s)
	switch {
	case !ok:
		*dst = absent
	default:
		*dst = max(n, 0)
	}
	return err
}

// details reads a *_details object's field, keeping the largest count seen.
func details(s *jsonscan.Scanner, field string, dst *int64) error {
	if s.Peek() != '{' {
		return s.Skip()
	}
	return s.Object(func(k []byte, esc bool) error {
		if !jsonscan.KeyIs(k, esc, field) {
			return s.Skip()
		}
		var v int64
		err := count(s, &v, -1)
		*dst = max(*dst, v)
		return err
	})
}

// number reads a numeric value; ok is false for null or non-numbers
// (which are skipped).
func number(s *jsonscan.Scanner) (float64, int64, bool, error) {
	if c := s.Peek(); c != '-' && (c < '0' || c > '9') {
		return 0, 0, false, s.Skip()
	}
	raw, integer, err := s.Number()
	if err != nil {
		return 0, 0, false, err
	}
	// Integers, the usual case, without strconv.
	if d := bytes.TrimPrefix(raw, []byte{'-'}); integer && len(d) <= 18 {
		var n int64
		for _, ch := range d {
			n = n*10 + int64(ch-'0')
		}
		if len(d) < len(raw) {
			n = -n
		}
		return float64(n), n, true, nil
	}
	f, perr := strconv.ParseFloat(string(raw), 64)
	if perr != nil {
		return 0, 0, false, nil
	}
	return f, int64(f), true, nil
}

// Tokens is what counts against a token-per-minute limit: prompt plus
// completion (TotalTokens when the provider reported only that).
func (u Usage) Tokens() int64 {
	if t := u.PromptTokens + u.CompletionTokens; t > 0 {
		return t
	}
	return u.TotalTokens
}
