// Package usage reads token usage from LLM responses: whole JSON bodies
// (FromJSON), server-sent event streams fed chunk by chunk (StreamParser),
// the removal of the usage-only chunk the gateway asked for on the client's
// behalf (StreamFilter), and gzip-encoded bodies decoded incrementally
// (GzipStream). It has no gRPC or Envoy types.
package usage

import (
	"bytes"
	"math"
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
	TotalTokens      int64 `json:"total_tokens"`     // provider's total, never below prompt + completion
	CachedTokens     int64 `json:"cached_tokens"`    // prompt tokens served from the provider's cache
	ReasoningTokens  int64 `json:"reasoning_tokens"` // completion tokens spent on hidden reasoning
	// CacheWriteTokens are prompt tokens written to the provider's cache
	// (Anthropic's cache_creation_input_tokens, OpenRouter's
	// prompt_tokens_details.cache_write_tokens), priced apart; they are
	// part of PromptTokens.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// Cost is what the provider says the call cost (OpenRouter's usage.cost,
	// in its credits, i.e. USD); 0 when not reported. It is informational:
	// the gateway bills from its price table, and the ledger does not
	// record it.
	Cost float64 `json:"-"`
}

// MaxTokens bounds every count read from a provider. A count beyond it
// (1e30, 20 digits) is an absurd report, not a reason to bill nothing:
// it counts MaxTokens, far above any real request, and sums of a few
// counts stay far from overflowing int64.
const MaxTokens = 1_000_000_000_000

// Normalize makes u's counts consistent, so that the ledger, the price and
// the token limits count the same tokens. The parsers return normalised
// usage; Rate.Cost normalises its copy again, which changes nothing then.
// In place, as it runs for every request priced: a value method copying
// the struct in and out made Rate.Cost several times slower.
//
//   - Negative counts are 0.
//   - ReasoningTokens above CompletionTokens were reported beside the
//     completion, not in it (relays of Gemini's thoughtsTokenCount):
//     they are added to it.
//   - A TotalTokens above PromptTokens + CompletionTokens holds output
//     reported nowhere else: CompletionTokens is raised to TotalTokens -
//     PromptTokens. A usage with only a total keeps it as is (Rate.Cost
//     bills it at the dearer of input and output).
//   - TotalTokens is at least PromptTokens + CompletionTokens.
func (u *Usage) Normalize() {
	u.PromptTokens, u.CompletionTokens, u.TotalTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0), max(u.TotalTokens, 0)
	u.CachedTokens, u.ReasoningTokens, u.CacheWriteTokens = max(u.CachedTokens, 0), max(u.ReasoningTokens, 0), max(u.CacheWriteTokens, 0)
	if u.ReasoningTokens > u.CompletionTokens {
		u.CompletionTokens = addSat(u.CompletionTokens, u.ReasoningTokens)
	}
	parts := addSat(u.PromptTokens, u.CompletionTokens)
	if parts > 0 && u.TotalTokens > parts {
		u.CompletionTokens = u.TotalTokens - u.PromptTokens
		parts = u.TotalTokens
	}
	u.TotalTokens = max(u.TotalTokens, parts)
}

// addSat adds two non-negative counts, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// parseUsage reads a usage object at the scanner's position. Accepted
// spellings:
//   - OpenAI chat/completions/embeddings: prompt_tokens, completion_tokens,
//     total_tokens, prompt_tokens_details.cached_tokens,
//     completion_tokens_details.reasoning_tokens;
//   - OpenAI responses API and relays copying it: input_tokens,
//     output_tokens, input_tokens_details.cached_tokens and
//     .cache_write_tokens, output_tokens_details.reasoning_tokens;
//   - DeepSeek: prompt_cache_hit_tokens;
//   - Anthropic-shaped relays: cache_read_input_tokens and
//     cache_creation_input_tokens, which Anthropic does not include in
//     input_tokens, so they are added to PromptTokens;
//   - OpenRouter: prompt_tokens_details.cache_write_tokens, cost.
//
// ok is false when the object has no token count at all.
func parseUsage(s *jsonscan.Scanner) (u Usage, ok bool, err error) {
	f, ok, err := parseFields(s)
	if !ok {
		return Usage{}, false, err
	}
	return f.usage(), true, nil
}

// parseFields reads a usage object's counts as spelled, for a stream to
// merge with the counts it already has (Anthropic's message_delta).
func parseFields(s *jsonscan.Scanner) (f usageFields, ok bool, err error) {
	f = absentFields
	err = s.Object(func(k []byte, esc bool) error { return f.member(s, k, esc) })
	if err != nil || !f.counted() {
		return usageFields{}, false, err
	}
	return f, true, nil
}

// usageFields are the counts of one usage object as spelled; -1: absent.
type usageFields struct {
	prompt, input, compl, output, total int64
	cached, hit, cacheRead              int64
	cacheCreate, cacheWrite             int64
	reasoning                           int64
	cost                                float64
}

var absentFields = usageFields{prompt: -1, input: -1, compl: -1, output: -1, total: -1,
	cached: -1, hit: -1, cacheRead: -1, cacheCreate: -1, cacheWrite: -1, reasoning: -1}

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
		return details(s, "cached_tokens", &f.cached, "cache_write_tokens", &f.cacheWrite)
	case "completion_tokens_details", "output_tokens_details":
		return details(s, "reasoning_tokens", &f.reasoning, "", nil)
	case "prompt_cache_hit_tokens":
		dst = &f.hit
	case "cache_read_input_tokens":
		dst = &f.cacheRead
	case "cache_creation_input_tokens":
		dst = &f.cacheCreate
	case "cost":
		v, _, ok, err := number(s)
		if ok && v > 0 && v <= math.MaxFloat64 { // not 1e400's +Inf
			f.cost = v
		}
		return err
	default:
		return s.Skip()
	}
	return count(s, dst)
}

func (f *usageFields) counted() bool {
	return f.prompt >= 0 || f.input >= 0 || f.compl >= 0 || f.output >= 0 || f.total >= 0
}

func (f *usageFields) hasInput() bool { return f.prompt >= 0 || f.input >= 0 }

// merge lays the counts d states over f's, as Anthropic's SDK merges a
// message_delta's usage into message_start's: a count d leaves out stands.
func (f usageFields) merge(d usageFields) usageFields {
	set := func(dst *int64, v int64) {
		if v >= 0 {
			*dst = v
		}
	}
	set(&f.prompt, d.prompt)
	set(&f.input, d.input)
	set(&f.compl, d.compl)
	set(&f.output, d.output)
	set(&f.cached, d.cached)
	set(&f.hit, d.hit)
	set(&f.cacheRead, d.cacheRead)
	set(&f.cacheCreate, d.cacheCreate)
	set(&f.cacheWrite, d.cacheWrite)
	set(&f.reasoning, d.reasoning)
	// A total sums the counts it came with; once they changed, only d's
	// own total is one.
	f.total = d.total
	if d.cost > 0 {
		f.cost = d.cost
	}
	return f
}

// usage normalises the counts to OpenAI's meaning.
func (f *usageFields) usage() Usage {
	cacheRead, cacheCreate := max(f.cacheRead, 0), max(f.cacheCreate, 0)
	// A cache write counts once whatever the shape: it is part of
	// prompt_tokens (OpenRouter's cache_write_tokens; relays such as
	// LiteLLM add Anthropic's cache_creation_input_tokens into
	// prompt_tokens and copy the field) and of the Responses API's
	// input_tokens (its details), and is added to Anthropic's input_tokens
	// below. Two spellings of it are one write.
	write := max(cacheCreate, f.cacheWrite, 0)
	u := Usage{Cost: f.cost, ReasoningTokens: max(f.reasoning, 0), CachedTokens: max(f.cached, f.hit, cacheRead, 0), CacheWriteTokens: write}
	switch {
	case f.prompt >= 0:
		u.PromptTokens = f.prompt
	case f.input >= 0:
		u.PromptTokens = f.input + cacheRead + cacheCreate
	}
	switch {
	case f.compl >= 0:
		u.CompletionTokens = f.compl
	case f.output >= 0:
		u.CompletionTokens = f.output
	}
	u.TotalTokens = max(f.total, 0)
	u.Normalize()
	return u
}

// count reads a token count into *dst: a negative number counts 0, one
// above MaxTokens counts MaxTokens, null or a non-number is absent (-1).
func count(s *jsonscan.Scanner, dst *int64) error {
	_, n, ok, err := number(s)
	switch {
	case !ok:
		*dst = -1
	default:
		*dst = min(max(n, 0), MaxTokens)
	}
	return err
}

// details reads a *_details object's fields name1 and name2 (when
// dst2 is not nil), keeping the largest count of each.
func details(s *jsonscan.Scanner, name1 string, dst1 *int64, name2 string, dst2 *int64) error {
	if s.Peek() != '{' {
		return s.Skip()
	}
	return s.Object(func(k []byte, esc bool) error {
		dst := dst1
		switch {
		case jsonscan.KeyIs(k, esc, name1):
		case dst2 != nil && jsonscan.KeyIs(k, esc, name2):
			dst = dst2
		default:
			return s.Skip()
		}
		var v int64
		err := count(s, &v)
		*dst = max(*dst, v)
		return err
	})
}

// number reads a numeric value; ok is false for null or non-numbers
// (which are skipped). The integer is clamped to ±MaxTokens: converting a
// float beyond int64 is undefined (MinInt64 on amd64), which made 1e30
// tokens count 0.
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
	// The scanner checked the syntax, so the only error left is a range
	// error, whose result is ±Inf: still a number, clamped below.
	f, _ := strconv.ParseFloat(string(raw), 64)
	switch {
	case f >= MaxTokens:
		return f, MaxTokens, true, nil
	case f <= -MaxTokens:
		return f, -MaxTokens, true, nil
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
