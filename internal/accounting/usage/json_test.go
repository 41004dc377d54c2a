package usage

import (
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
