package pricing

import (
	"math"
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/config"
)

func TestRateOf(t *testing.T) {
	tests := []struct {
		name  string
		price config.Price
		want  Rate
	}{
		{"all set", config.Price{InputPerMTok: 2.5, CachedInputPerMTok: 1.25, OutputPerMTok: 10, ReasoningPerMTok: 12},
			Rate{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000, Reasoning: 12_000_000, CacheWrite: 2_500_000}},
		{"cached and reasoning fall back", config.Price{InputPerMTok: 0.15, OutputPerMTok: 0.6},
			Rate{Input: 150_000, CachedInput: 150_000, Output: 600_000, Reasoning: 600_000, CacheWrite: 150_000}},
		{"six decimals exact", config.Price{InputPerMTok: 0.000001, OutputPerMTok: 0.075},
			Rate{Input: 1, CachedInput: 1, Output: 75_000, Reasoning: 75_000, CacheWrite: 1}},
		{"float noise rounded", config.Price{InputPerMTok: 0.1 + 0.2, OutputPerMTok: 1.1},
			Rate{Input: 300_000, CachedInput: 300_000, Output: 1_100_000, Reasoning: 1_100_000, CacheWrite: 300_000}},
		{"free", config.Price{}, Rate{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RateOf(tc.price); got != tc.want {
				t.Fatalf("RateOf(%+v) = %+v, want %+v", tc.price, got, tc.want)
			}
		})
	}
}

func TestCost(t *testing.T) {
	gpt := RateOf(config.Price{InputPerMTok: 2.5, CachedInputPerMTok: 1.25, OutputPerMTok: 10})
	o1 := RateOf(config.Price{InputPerMTok: 15, CachedInputPerMTok: 7.5, OutputPerMTok: 60, ReasoningPerMTok: 80})
	cheap := RateOf(config.Price{InputPerMTok: 0.075, OutputPerMTok: 0.3})
	tiny := RateOf(config.Price{InputPerMTok: 0.0001})
	tests := []struct {
		name string
		rate Rate
		u    Usage
		want string
	}{
		{"zero", gpt, Usage{}, "0.000000000"},
		{"prompt only", gpt, Usage{PromptTokens: 1_000_000}, "2.500000000"},
		{"prompt and completion", gpt, Usage{PromptTokens: 1000, CompletionTokens: 500}, "0.007500000"},
		// 400 uncached * 2.5e-6 + 600 cached * 1.25e-6 + 100 out * 1e-5
		{"cached part of prompt", gpt, Usage{PromptTokens: 1000, CachedTokens: 600, CompletionTokens: 100}, "0.002750000"},
		{"cached above prompt is clamped", gpt, Usage{PromptTokens: 10, CachedTokens: 50}, "0.000012500"},
		// 100 in*15e-6 + 200 out*60e-6 + 300 reasoning*80e-6
		{"reasoning own price", o1, Usage{PromptTokens: 100, CompletionTokens: 500, ReasoningTokens: 300}, "0.037500000"},
		{"reasoning falls back to output", gpt, Usage{CompletionTokens: 10, ReasoningTokens: 10}, "0.000100000"},
		{"one cheap token", cheap, Usage{PromptTokens: 1, CompletionTokens: 1}, "0.000000375"},
		// 0.0001/MTok is 100 pico per token: 4 tokens round down, 5 round half up
		{"sub-nano rounds down", tiny, Usage{PromptTokens: 4}, "0.000000000"},
		{"half nano rounds up", tiny, Usage{PromptTokens: 5}, "0.000000001"},
		{"total only billed at dearer rate", gpt, Usage{TotalTokens: 100}, "0.001000000"},
		{"negative counts ignored", gpt, Usage{PromptTokens: -5, CompletionTokens: 100}, "0.001000000"},
		{"huge saturates", Rate{Input: math.MaxInt64}, Usage{PromptTokens: math.MaxInt64}, Money(math.MaxInt64).String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rate.Cost(tc.u).String(); got != tc.want {
				t.Fatalf("Cost(%+v) = %s, want %s", tc.u, got, tc.want)
			}
		})
	}
}

func TestCostSumIsExact(t *testing.T) {
	// 10,000 requests of 123 prompt + 45 completion tokens at 2.5/10 per MTok
	// cost exactly 10,000 * (307.5 + 450) micro = 7.575 units.
	r := RateOf(config.Price{InputPerMTok: 2.5, OutputPerMTok: 10})
	var sum Money
	for range 10000 {
		sum += r.Cost(Usage{PromptTokens: 123, CompletionTokens: 45})
	}
	if got := sum.String(); got != "7.575000000" {
		t.Fatalf("sum = %s, want 7.575000000", got)
	}
}

func TestEstimate(t *testing.T) {
	r := RateOf(config.Price{InputPerMTok: 1, OutputPerMTok: 2, ReasoningPerMTok: 3})
	if got, want := r.Estimate(1000, 100), FromFloat(0.001+0.0003); got != want {
		t.Fatalf("Estimate = %s, want %s", got, want)
	}
}

func TestMoneyText(t *testing.T) {
	tests := []struct {
		m     Money
		s     string
		short string
	}{
		{0, "0.000000000", "0.000000"},
		{1, "0.000000001", "0.000000"},
		{1500, "0.000001500", "0.000002"},
		{FromFloat(12.5), "12.500000000", "12.500000"},
		{-FromFloat(0.25), "-0.250000000", "-0.250000"},
	}
	for _, tc := range tests {
		if got := tc.m.String(); got != tc.s {
			t.Errorf("String(%d) = %s, want %s", int64(tc.m), got, tc.s)
		}
		if got := tc.m.Short(); got != tc.short {
			t.Errorf("Short(%d) = %s, want %s", int64(tc.m), got, tc.short)
		}
		back, err := ParseMoney(tc.s)
		if err != nil || back != tc.m {
			t.Errorf("ParseMoney(%s) = %d, %v; want %d", tc.s, back, err, tc.m)
		}
		b, _ := tc.m.MarshalJSON()
		var j Money
		if err := j.UnmarshalJSON(b); err != nil || j != tc.m {
			t.Errorf("JSON round trip of %s = %s, %v", tc.s, j, err)
		}
	}
	for _, bad := range []string{"", "x", "1.0000000001", ".5"} {
		if _, err := ParseMoney(bad); err == nil {
			t.Errorf("ParseMoney(%q) succeeded", bad)
		}
	}
}

func BenchmarkCost(b *testing.B) {
	r := RateOf(config.Price{InputPerMTok: 2.5, CachedInputPerMTok: 1.25, OutputPerMTok: 10})
	u := Usage{PromptTokens: 12345, CachedTokens: 1000, CompletionTokens: 678, ReasoningTokens: 100}
	b.ReportAllocs()
	var s Money
	for b.Loop() {
		s += r.Cost(u)
	}
	_ = s
}

// TestCostOutputOutsideCompletion: reasoning reported beside
// completion_tokens is billed, and the tokens priced are the ones the
// parser hands the ledger and the token limits.
func TestCostOutputOutsideCompletion(t *testing.T) {
	gpt := RateOf(config.Price{InputPerMTok: 2.5, OutputPerMTok: 10})
	o1 := RateOf(config.Price{InputPerMTok: 15, OutputPerMTok: 60, ReasoningPerMTok: 80})
	tests := []struct {
		name string
		rate Rate
		body string
		raw  Usage // the same report built by hand, not normalised
		want string
	}{
		// 21 in * 2.5e-6 + 60 out * 1e-5
		{"reasoning beside completion", gpt, `{"usage":{"prompt_tokens":21,"completion_tokens":0,"total_tokens":81,"completion_tokens_details":{"reasoning_tokens":60}}}`,
			Usage{PromptTokens: 21, TotalTokens: 81, ReasoningTokens: 60}, "0.000652500"},
		// 21 * 15e-6 + 5 * 60e-6 + 60 * 80e-6
		{"reasoning at its own price", o1, `{"usage":{"prompt_tokens":21,"completion_tokens":5,"total_tokens":86,"completion_tokens_details":{"reasoning_tokens":60}}}`,
			Usage{PromptTokens: 21, CompletionTokens: 5, TotalTokens: 86, ReasoningTokens: 60}, "0.005415000"},
		{"total above its parts", gpt, `{"usage":{"prompt_tokens":21,"completion_tokens":0,"total_tokens":81}}`,
			Usage{PromptTokens: 21, TotalTokens: 81}, "0.000652500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := usage.FromJSON([]byte(tc.body))
			if !ok {
				t.Fatal("no usage")
			}
			if got := tc.rate.Cost(u).String(); got != tc.want {
				t.Fatalf("Cost(%+v) = %s, want %s", u, got, tc.want)
			}
			if got := tc.rate.Cost(tc.raw).String(); got != tc.want {
				t.Fatalf("Cost(%+v) = %s, want %s", tc.raw, got, tc.want)
			}
			// The ledger records u's counts and the limits count
			// u.Tokens(): they are the tokens priced.
			byCounts := tc.rate.Cost(Usage{PromptTokens: u.PromptTokens}) +
				tc.rate.Cost(Usage{CompletionTokens: u.CompletionTokens, ReasoningTokens: u.ReasoningTokens})
			if got := tc.rate.Cost(u); got != byCounts || u.Tokens() != u.TotalTokens {
				t.Fatalf("cost %s, by the ledger's counts %s; tokens %d, total %d", got, byCounts, u.Tokens(), u.TotalTokens)
			}
		})
	}
}

// TestCostCacheWrites: cache writes reported beside prompt_tokens are
// billed at the cache-write price, once.
func TestCostCacheWrites(t *testing.T) {
	claude := RateOf(config.Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWriteInputPerMTok: 3.75, OutputPerMTok: 15})
	tests := []struct {
		name string
		body string
		want string
	}{
		// 94 in * 3e-6 + 100 written * 3.75e-6 + 2 out * 15e-6
		{"openrouter", `{"usage":{"prompt_tokens":194,"completion_tokens":2,"total_tokens":196,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":100}}}`, "0.000687000"},
		// 15 in * 3e-6 + 3000 read * 0.3e-6 + 200 written * 3.75e-6 + 5 out * 15e-6
		{"prompt_tokens with cache_creation_input_tokens", `{"usage":{"prompt_tokens":3215,"completion_tokens":5,"total_tokens":3220,"prompt_tokens_details":{"cached_tokens":3000},"cache_creation_input_tokens":200,"cache_read_input_tokens":3000}}`, "0.001770000"},
		{"anthropic shape, same request", `{"usage":{"input_tokens":15,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":5}}`, "0.001770000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := usage.FromJSON([]byte(tc.body))
			if !ok {
				t.Fatal("no usage")
			}
			if got := claude.Cost(u).String(); got != tc.want {
				t.Fatalf("Cost(%+v) = %s, want %s", u, got, tc.want)
			}
		})
	}
}

// TestCostHugeCountIsNotFree: an absurd count is billed (saturating), not
// read as 0 tokens.
func TestCostHugeCountIsNotFree(t *testing.T) {
	gpt := RateOf(config.Price{InputPerMTok: 2.5, OutputPerMTok: 10})
	for _, body := range []string{
		`{"usage":{"prompt_tokens":1e30,"completion_tokens":5}}`,
		`{"usage":{"prompt_tokens":12345678901234567890,"completion_tokens":5}}`,
	} {
		u, ok := usage.FromJSON([]byte(body))
		if c := gpt.Cost(u); !ok || c < gpt.Cost(Usage{PromptTokens: usage.MaxTokens}) {
			t.Errorf("%s: cost %s for %+v", body, c, u)
		}
	}
}
