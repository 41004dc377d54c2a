package pricing

import (
	"math"
	"math/bits"

	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Rate is a target's price in pico-units per token (numerically equal to
// micro-units per million tokens). Integers make costs exact.
type Rate struct {
	Input       int64 // uncached prompt tokens
	CachedInput int64 // prompt tokens served from the provider's cache
	Output      int64 // completion tokens that are not reasoning
	Reasoning   int64 // reasoning tokens
	CacheWrite  int64 // prompt tokens written to the provider's cache
}

// RateOf converts a configured price. A zero CachedInputPerMTok bills cached
// tokens at the input price and a zero ReasoningPerMTok bills reasoning at
// the output price: an unset price never makes tokens free.
func RateOf(p config.Price) Rate {
	r := Rate{
		Input:       perToken(p.InputPerMTok),
		CachedInput: perToken(p.CachedInputPerMTok),
		Output:      perToken(p.OutputPerMTok),
		Reasoning:   perToken(p.ReasoningPerMTok),
		CacheWrite:  perToken(p.CacheWriteInputPerMTok),
	}
	if p.CacheWriteInputPerMTok == 0 {
		r.CacheWrite = r.Input
	}
	if p.CachedInputPerMTok == 0 {
		r.CachedInput = r.Input
	}
	if p.ReasoningPerMTok == 0 {
		r.Reasoning = r.Output
	}
	return r
}

// perToken turns money per million tokens into pico-units per token,
// rounding to the nearest integer (exact for prices with up to 6 decimals).
func perToken(perMTok float64) int64 {
	if perMTok <= 0 || math.IsNaN(perMTok) {
		return 0
	}
	v := math.Round(perMTok * 1e6)
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// Cost prices one request's usage, normalised first (usage.Usage.Normalize:
// reasoning reported beside the completion and a total above prompt +
// completion are output; the parsers' usage is normalised already, so the
// ledger's counts are what is priced). Cached tokens (at most
// PromptTokens) are billed at CachedInput, cache writes (at most the rest)
// at CacheWrite and the rest of the prompt at Input; reasoning tokens (at
// most CompletionTokens) at Reasoning and the rest at Output. The exact
// sum in pico-units is rounded half up to nano-units once.
func (r Rate) Cost(u usage.Usage) Money {
	u.Normalize()
	prompt, completion := u.PromptTokens, u.CompletionTokens
	if prompt == 0 && completion == 0 && u.TotalTokens > 0 {
		// A provider that reports only a total: bill it at the dearer of
		// the input and output rates so it is never under-billed.
		return picoToMoney(mulAdd(acc{}, u.TotalTokens, max(r.Input, r.Output)))
	}
	cached := min(u.CachedTokens, prompt)
	written := min(u.CacheWriteTokens, prompt-cached)
	reasoning := min(u.ReasoningTokens, completion)
	var a acc
	a = mulAdd(a, prompt-cached-written, r.Input)
	a = mulAdd(a, cached, r.CachedInput)
	a = mulAdd(a, written, r.CacheWrite)
	a = mulAdd(a, completion-reasoning, r.Output)
	a = mulAdd(a, reasoning, r.Reasoning)
	return picoToMoney(a)
}

// Estimate is the most a request can cost before it runs: the prompt at the
// input price and maxOutput at the dearer of output and reasoning prices.
func (r Rate) Estimate(promptTokens, maxOutput int64) Money {
	var a acc
	a = mulAdd(a, nonNeg(promptTokens), max(r.Input, r.CacheWrite))
	a = mulAdd(a, nonNeg(maxOutput), max(r.Output, r.Reasoning))
	return picoToMoney(a)
}

// acc is an unsigned 128-bit accumulator of pico-units.
type acc struct{ hi, lo uint64 }

func mulAdd(a acc, tokens, rate int64) acc {
	hi, lo := bits.Mul64(uint64(tokens), uint64(rate))
	var c uint64
	a.lo, c = bits.Add64(a.lo, lo, 0)
	a.hi, _ = bits.Add64(a.hi, hi, c)
	return a
}

// picoToMoney divides by 1000 rounding half up, saturating at MaxInt64.
func picoToMoney(a acc) Money {
	lo, c := bits.Add64(a.lo, 500, 0)
	hi := a.hi + c
	if hi >= 1000 {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, 1000)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return Money(q)
}

func nonNeg(v int64) int64 {
	if v < 0 {
		return 0
	}
	return v
}
