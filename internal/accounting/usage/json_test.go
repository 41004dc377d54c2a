package usage

import (
	"math"
	"strings"
	"testing"
)

func TestFromJSONFixtures(t *testing.T) {
	for name, want := range jsonFixtures {
		t.Run(name, func(t *testing.T) {
			body := readFixture(t, name)
			got, ok := FromJSON(body)
			if !ok || got != want {
				t.Errorf("FromJSON = %+v, %v; want %+v", got, ok, want)
			}
			// The slow path must agree with the tail shortcut.
			if w, ok := fromWalk(body); !ok || w != want {
				t.Errorf("fromWalk = %+v, %v; want %+v", w, ok, want)
			}
		})
	}
}

func TestFromJSONCases(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
		ok   bool
	}{
		{"usage first", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"choices":[]}`, Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, true},
		{"nested usage ignored", `{"choices":[{"usage":{"prompt_tokens":9}}],"usage":{"prompt_tokens":1}}`, Usage{PromptTokens: 1, TotalTokens: 1}, true},
		{"only nested usage", `{"choices":[{"usage":{"prompt_tokens":9}}]}`, Usage{}, false},
		{"nested last, top-level earlier", `{"usage":{"total_tokens":4},"x":{"usage":{"total_tokens":9}}}`, Usage{TotalTokens: 4}, true},
		{"usage in string ignored", `{"content":"\"usage\":{\"prompt_tokens\":9}}"}`, Usage{}, false},
		{"usage key inside escaped key", `{"a\"usage":{"prompt_tokens":9}}`, Usage{}, false},
		{"null usage", `{"choices":[],"usage":null}`, Usage{}, false},
		{"empty usage", `{"usage":{}}`, Usage{}, false},
		{"no usage", `{"id":"x"}`, Usage{}, false},
		{"not an object", `[{"usage":{"prompt_tokens":1}}]`, Usage{}, false},
		{"garbage", `{"usage":{"prompt_tokens":`, Usage{}, false},
		{"trailing whitespace", "{\"usage\":{\"total_tokens\":2}}\n\n", Usage{TotalTokens: 2}, true},
		{"float counts", `{"usage":{"prompt_tokens":12.0,"completion_tokens":1e2}}`, Usage{PromptTokens: 12, CompletionTokens: 100, TotalTokens: 112}, true},
		{"negative clamps", `{"usage":{"prompt_tokens":-5,"completion_tokens":3}}`, Usage{CompletionTokens: 3, TotalTokens: 3}, true},
		{"responses api", `{"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":6},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":123}}`,
			Usage{PromptTokens: 36, CompletionTokens: 87, TotalTokens: 123, CachedTokens: 6, ReasoningTokens: 20}, true},
		{"deepseek hit without details", `{"usage":{"prompt_tokens":100,"completion_tokens":1,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}`,
			Usage{PromptTokens: 100, CompletionTokens: 1, TotalTokens: 101, CachedTokens: 64}, true},
		{"anthropic shape", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":5}}`,
			Usage{PromptTokens: 60, CompletionTokens: 5, TotalTokens: 65, CachedTokens: 30, CacheWriteTokens: 20}, true},
		{"details null", `{"usage":{"prompt_tokens":1,"prompt_tokens_details":null,"completion_tokens_details":null}}`, Usage{PromptTokens: 1, TotalTokens: 1}, true},
		{"openrouter cost", `{"usage":{"prompt_tokens":1,"cost":0.5,"cost_details":{"upstream_inference_cost":19}}}`, Usage{PromptTokens: 1, TotalTokens: 1, Cost: 0.5}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FromJSON([]byte(tt.body))
			if ok != tt.ok || got != tt.want {
				t.Errorf("FromJSON = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestFromJSONLargeEmbeddings: a multi-megabyte body with usage at the end
// is answered from the tail.
func TestFromJSONLargeEmbeddings(t *testing.T) {
	body := largeEmbeddings(4 << 20)
	u, ok := FromJSON(body)
	if !ok || u.PromptTokens != 8 {
		t.Fatalf("FromJSON = %+v, %v", u, ok)
	}
	if _, _, proven := fromTail(body); !proven {
		t.Fatal("tail shortcut not taken")
	}
}

func largeEmbeddings(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[`)
	for b.Len() < size {
		b.WriteString("-0.006929283495992422,0.012817267328500748,")
	}
	b.WriteString(`0.1]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`)
	return []byte(b.String())
}

// TestFromJSONOutputOutsideCompletion: output a provider reports beside
// completion_tokens (reasoning, or only in the total) is counted as
// completion, so the ledger, the price and the token limits all see it.
func TestFromJSONOutputOutsideCompletion(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
	}{
		// As relays of Gemini report it: thoughts only in the details and the total.
		{"reasoning beside completion", `{"usage":{"prompt_tokens":21,"completion_tokens":0,"total_tokens":81,"completion_tokens_details":{"reasoning_tokens":60}}}`,
			Usage{PromptTokens: 21, CompletionTokens: 60, TotalTokens: 81, ReasoningTokens: 60}},
		{"reasoning beside a visible answer", `{"usage":{"prompt_tokens":21,"completion_tokens":5,"total_tokens":86,"completion_tokens_details":{"reasoning_tokens":60}}}`,
			Usage{PromptTokens: 21, CompletionTokens: 65, TotalTokens: 86, ReasoningTokens: 60}},
		{"reasoning above completion without a total", `{"usage":{"prompt_tokens":21,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":60}}}`,
			Usage{PromptTokens: 21, CompletionTokens: 65, TotalTokens: 86, ReasoningTokens: 60}},
		{"total above its parts", `{"usage":{"prompt_tokens":21,"completion_tokens":5,"total_tokens":86}}`,
			Usage{PromptTokens: 21, CompletionTokens: 65, TotalTokens: 86}},
		{"responses API shape", `{"usage":{"input_tokens":21,"output_tokens":0,"output_tokens_details":{"reasoning_tokens":60},"total_tokens":81}}`,
			Usage{PromptTokens: 21, CompletionTokens: 60, TotalTokens: 81, ReasoningTokens: 60}},
		{"total below its parts is raised", `{"usage":{"input_tokens":10,"cache_read_input_tokens":30,"output_tokens":5,"total_tokens":15}}`,
			Usage{PromptTokens: 40, CompletionTokens: 5, TotalTokens: 45, CachedTokens: 30}},
		// Unchanged: reasoning inside completion (OpenAI), and a total alone
		// (pricing bills it at the dearer of input and output).
		{"reasoning inside completion", `{"usage":{"prompt_tokens":43,"completion_tokens":2074,"total_tokens":2117,"completion_tokens_details":{"reasoning_tokens":1536}}}`,
			Usage{PromptTokens: 43, CompletionTokens: 2074, TotalTokens: 2117, ReasoningTokens: 1536}},
		{"total only", `{"usage":{"total_tokens":100}}`, Usage{TotalTokens: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FromJSON([]byte(tt.body))
			if !ok || got != tt.want {
				t.Fatalf("FromJSON = %+v, %v; want %+v", got, ok, tt.want)
			}
			if n := normalized(got); n != got {
				t.Fatalf("not normalised: Normalize() gives %+v", n)
			}
		})
	}
}

// TestFromJSONHugeCounts: a count beyond int64 or float range is clamped
// to MaxTokens, never 0 (which made the request free).
func TestFromJSONHugeCounts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
	}{
		{"1e30", `{"usage":{"prompt_tokens":1e30,"completion_tokens":5}}`,
			Usage{PromptTokens: MaxTokens, CompletionTokens: 5, TotalTokens: MaxTokens + 5}},
		{"20 digits", `{"usage":{"prompt_tokens":3,"completion_tokens":12345678901234567890}}`,
			Usage{PromptTokens: 3, CompletionTokens: MaxTokens, TotalTokens: MaxTokens + 3}},
		{"18 digits", `{"usage":{"prompt_tokens":999999999999999999}}`,
			Usage{PromptTokens: MaxTokens, TotalTokens: MaxTokens}},
		{"beyond float range", `{"usage":{"prompt_tokens":1e400}}`,
			Usage{PromptTokens: MaxTokens, TotalTokens: MaxTokens}},
		{"huge cache count", `{"usage":{"input_tokens":1,"cache_read_input_tokens":1e30,"output_tokens":1}}`,
			Usage{PromptTokens: MaxTokens + 1, CompletionTokens: 1, TotalTokens: MaxTokens + 2, CachedTokens: MaxTokens}},
		{"huge negative counts 0", `{"usage":{"prompt_tokens":-1e30,"completion_tokens":-12345678901234567890,"total_tokens":7}}`,
			Usage{TotalTokens: 7}},
		{"exactly MaxTokens", `{"usage":{"prompt_tokens":1000000000000}}`,
			Usage{PromptTokens: MaxTokens, TotalTokens: MaxTokens}},
		{"cost beyond float range ignored", `{"usage":{"prompt_tokens":1,"cost":1e400}}`,
			Usage{PromptTokens: 1, TotalTokens: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := FromJSON([]byte(tt.body)); !ok || got != tt.want {
				t.Fatalf("FromJSON = %+v, %v; want %+v", got, ok, tt.want)
			}
		})
	}
}

// TestFromJSONCacheWrites: cache writes are CacheWriteTokens in every
// shape, counted once in PromptTokens.
func TestFromJSONCacheWrites(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
	}{
		// OpenRouter's own example: prompt_tokens (194) includes the 100
		// written (total 196 = 194 + 2).
		{"openrouter cache_write_tokens", `{"usage":{"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":0},"cost":0.95,"prompt_tokens":194,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":100,"audio_tokens":0},"total_tokens":196}}`,
			Usage{PromptTokens: 194, CompletionTokens: 2, TotalTokens: 196, CacheWriteTokens: 100, Cost: 0.95}},
		// LiteLLM-style: prompt_tokens = input 15 + cache write 200 + cache
		// read 3000, Anthropic's fields copied beside it.
		{"prompt_tokens with cache_creation_input_tokens", `{"usage":{"prompt_tokens":3215,"completion_tokens":5,"total_tokens":3220,"prompt_tokens_details":{"cached_tokens":3000},"cache_creation_input_tokens":200,"cache_read_input_tokens":3000}}`,
			Usage{PromptTokens: 3215, CompletionTokens: 5, TotalTokens: 3220, CachedTokens: 3000, CacheWriteTokens: 200}},
		{"responses API input_tokens_details", `{"usage":{"input_tokens":500,"input_tokens_details":{"cached_tokens":100,"cache_write_tokens":300},"output_tokens":5,"total_tokens":505}}`,
			Usage{PromptTokens: 500, CompletionTokens: 5, TotalTokens: 505, CachedTokens: 100, CacheWriteTokens: 300}},
		{"anthropic shape adds the write to input_tokens", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":5}}`,
			Usage{PromptTokens: 60, CompletionTokens: 5, TotalTokens: 65, CachedTokens: 30, CacheWriteTokens: 20}},
		{"anthropic shape with the write also in details", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"input_tokens_details":{"cache_write_tokens":20},"output_tokens":5}}`,
			Usage{PromptTokens: 60, CompletionTokens: 5, TotalTokens: 65, CachedTokens: 30, CacheWriteTokens: 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := FromJSON([]byte(tt.body)); !ok || got != tt.want {
				t.Fatalf("FromJSON = %+v, %v; want %+v", got, ok, tt.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		in   Usage
		want Usage
	}{
		{"consistent unchanged", Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, ReasoningTokens: 2}, Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, ReasoningTokens: 2}},
		{"total filled", Usage{PromptTokens: 3, CompletionTokens: 4}, Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}},
		{"negatives are 0", Usage{PromptTokens: -3, CompletionTokens: 4, CachedTokens: -1}, Usage{CompletionTokens: 4, TotalTokens: 4}},
		{"reasoning only", Usage{ReasoningTokens: 9}, Usage{CompletionTokens: 9, TotalTokens: 9, ReasoningTokens: 9}},
		{"saturates", Usage{PromptTokens: math.MaxInt64, CompletionTokens: 1, ReasoningTokens: math.MaxInt64},
			Usage{PromptTokens: math.MaxInt64, CompletionTokens: math.MaxInt64, TotalTokens: math.MaxInt64, ReasoningTokens: math.MaxInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := normalized(tt.in)
			if got != tt.want {
				t.Fatalf("Normalize() gives %+v, want %+v", got, tt.want)
			}
			if again := normalized(got); again != got {
				t.Fatalf("not idempotent: %+v", again)
			}
		})
	}
}

func normalized(u Usage) Usage {
	u.Normalize()
	return u
}

// FromJSONTail finds the usage in the last bytes of a body only when the
// bytes after its key prove it a member of the outermost object.
func TestFromJSONTail(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		want       int64 // prompt tokens; -1: none found
	}{
		{"usage closes the body", `aaaa"}}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9},"system_fingerprint":"fp"}`, 7},
		{"a nested usage in the last member", `aaaa"}],"x":{"usage":{"prompt_tokens":7,"completion_tokens":2}}}`, -1},
		{"cut inside the usage", `"usage":{"prompt_tokens":7,"comple`, -1},
		{"no usage", `aaaa"}]}`, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := FromJSONTail([]byte(tc.tail))
			switch {
			case tc.want < 0 && ok:
				t.Errorf("found %+v, want none", u)
			case tc.want >= 0 && (!ok || u.PromptTokens != tc.want):
				t.Errorf("got %+v %v, want prompt %d", u, ok, tc.want)
			}
		})
	}
}
