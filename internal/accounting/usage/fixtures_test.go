package usage

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Recorded responses under testdata/ follow each provider's documented
// shapes. The reference functions below re-derive what the fast code must
// find with encoding/json and a plain line splitter, so fixtures need no
// hand-counted byte totals.

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fixtureNames(t testing.TB, ext string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("testdata", "*"+ext))
	if err != nil || len(m) == 0 {
		t.Fatalf("no %s fixtures: %v", ext, err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// refBlocks splits an SSE stream into event blocks, each ending after its
// blank line; the last block may be unterminated.
func refBlocks(stream []byte) [][]byte {
	var blocks [][]byte
	start, lineStart, hasLines := 0, 0, false
	for i := 0; i < len(stream); {
		c := stream[i]
		if c != '\n' && c != '\r' {
			i++
			continue
		}
		end := i + 1
		if c == '\r' && end < len(stream) && stream[end] == '\n' {
			end++
		}
		if i == lineStart { // blank line
			if hasLines {
				blocks = append(blocks, stream[start:end])
			} else {
				blocks = append(blocks, stream[start:end]) // stray blank line: its own block
			}
			start, hasLines = end, false
		} else {
			hasLines = true
		}
		i, lineStart = end, end
	}
	if start < len(stream) {
		blocks = append(blocks, stream[start:])
	}
	return blocks
}

// refData returns the joined data of a block and whether it has any.
func refData(block []byte) (string, bool) {
	norm := strings.ReplaceAll(strings.ReplaceAll(string(block), "\r\n", "\n"), "\r", "\n")
	var data []string
	has := false
	for _, line := range strings.Split(norm, "\n") {
		if line == "" || line[0] == ':' {
			continue
		}
		f, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		if f == "data" {
			data = append(data, v)
			has = true
		}
	}
	return strings.Join(data, "\n"), has
}

func refUsageOnly(block []byte) bool {
	d, ok := refData(block)
	if !ok {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(d), &m) != nil {
		return false
	}
	var choices []json.RawMessage
	if json.Unmarshal(m["choices"], &choices) != nil || m["choices"] == nil || len(choices) != 0 {
		return false
	}
	_, hasErr := m["error"]
	u := bytes.TrimSpace(m["usage"])
	return len(u) > 0 && u[0] == '{' && !hasErr
}

// refFilter is what StreamFilter must produce for a whole stream.
func refFilter(stream []byte) (out []byte, removed int) {
	for _, b := range refBlocks(stream) {
		if refUsageOnly(b) {
			removed++
			continue
		}
		out = append(out, b...)
	}
	return out, removed
}

// refDelivered sums the decoded text StreamParser must count.
func refDelivered(t testing.TB, stream []byte) (delivered int64, events int) {
	for _, b := range refBlocks(stream) {
		d, ok := refData(b)
		if !ok {
			continue
		}
		events++
		var ev struct {
			Choices []struct {
				Text  *string `json:"text"`
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
					Reasoning        *string `json:"reasoning"`
					Refusal          *string `json:"refusal"`
					ToolCalls        []struct {
						Function struct {
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Delta any `json:"delta"`
		}
		if strings.TrimSpace(d) == "[DONE]" {
			continue
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("fixture event is not JSON: %v\n%s", err, d)
		}
		add := func(s *string) {
			if s != nil {
				delivered += int64(len(*s))
			}
		}
		for _, c := range ev.Choices {
			add(c.Text)
			add(c.Delta.Content)
			add(c.Delta.ReasoningContent)
			add(c.Delta.Reasoning)
			add(c.Delta.Refusal)
			for _, tc := range c.Delta.ToolCalls {
				add(tc.Function.Arguments)
			}
		}
		if s, ok := ev.Delta.(string); ok {
			delivered += int64(len(s))
		}
	}
	return delivered, events
}

type streamWant struct {
	usage   Usage
	hasU    bool
	done    bool
	errHas  string // substring of Err(), "" for none
	removed int    // usage-only events StreamFilter removes
}

var streamFixtures = map[string]streamWant{
	"openai_chat_include_usage.sse": {usage: Usage{PromptTokens: 19, CompletionTokens: 10, TotalTokens: 29}, hasU: true, done: true, removed: 1},
	"openai_tool_calls.sse":         {usage: Usage{PromptTokens: 75, CompletionTokens: 38, TotalTokens: 113}, hasU: true, done: true, removed: 1},
	"openai_completions.sse":        {usage: Usage{PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12}, hasU: true, done: true, removed: 1},
	"azure_chat.sse":                {usage: Usage{PromptTokens: 25, CompletionTokens: 8, TotalTokens: 33}, hasU: true, done: true, removed: 1},
	"openrouter_chat.sse":           {usage: Usage{PromptTokens: 14, CompletionTokens: 12, TotalTokens: 26, Cost: 0.000222}, hasU: true, done: true},
	"vllm_reasoning.sse":            {usage: Usage{PromptTokens: 18, CompletionTokens: 23, TotalTokens: 41}, hasU: true, done: true, removed: 1},
	"deepseek_reasoner.sse":         {usage: Usage{PromptTokens: 136, CompletionTokens: 412, TotalTokens: 548, CachedTokens: 128, ReasoningTokens: 380}, hasU: true, done: true},
	"openai_reasoning.sse":          {usage: Usage{PromptTokens: 24, CompletionTokens: 1158, TotalTokens: 1182, ReasoningTokens: 1152}, hasU: true, done: true, removed: 1},
	"error_event.sse":               {errHas: "Upstream connection reset while streaming"},
	"openai_error_midstream.sse":    {errHas: "server_error"},
	"crlf_multiline.sse":            {usage: Usage{PromptTokens: 9, CompletionTokens: 2, TotalTokens: 11}, hasU: true, done: true, removed: 1},
	"responses_api.sse":             {usage: Usage{PromptTokens: 11, CompletionTokens: 4, TotalTokens: 15}, hasU: true, done: true}, // response.completed ends it
}

var jsonFixtures = map[string]Usage{
	"openai_chat.json":        {PromptTokens: 1117, CompletionTokens: 46, TotalTokens: 1163, CachedTokens: 1024},
	"openai_chat_tools.json":  {PromptTokens: 82, CompletionTokens: 17, TotalTokens: 99},
	"openai_completions.json": {PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12},
	"openai_embeddings.json":  {PromptTokens: 8, TotalTokens: 8},
	"azure_chat.json":         {PromptTokens: 29, CompletionTokens: 12, TotalTokens: 41},
	"openrouter_chat.json":    {PromptTokens: 194, CompletionTokens: 9, TotalTokens: 203, CachedTokens: 128, Cost: 0.0000345},
	"deepseek_chat.json":      {PromptTokens: 1610, CompletionTokens: 9, TotalTokens: 1619, CachedTokens: 1536},
	"openai_reasoning.json":   {PromptTokens: 43, CompletionTokens: 2074, TotalTokens: 2117, ReasoningTokens: 1536},
	"responses_api.json":      {PromptTokens: 36, CompletionTokens: 87, TotalTokens: 123},
	"vllm_chat.json":          {PromptTokens: 42, CompletionTokens: 8, TotalTokens: 50},
}

func TestFixturesListed(t *testing.T) {
	for _, n := range fixtureNames(t, ".sse") {
		if _, ok := streamFixtures[n]; !ok {
			t.Errorf("testdata/%s has no expectation in streamFixtures", n)
		}
	}
	for _, n := range fixtureNames(t, ".json") {
		if _, ok := jsonFixtures[n]; !ok {
			t.Errorf("testdata/%s has no expectation in jsonFixtures", n)
		}
	}
}
