package pairs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
)

// BenchmarkRequest is one request translation: the router-level filter
// pays it once to choose the cluster, every attempt's upstream filter once
// more. Bodies of a few turns with a tool, at 2 KB and 64 KB.
func BenchmarkRequest(b *testing.B) {
	bodies := map[string]func(text string) string{
		"messages_to_chat": func(text string) string {
			return `{"model":"m","max_tokens":1024,"system":[{"type":"text","text":"You are an agent."}],"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}],` +
				`"messages":[{"role":"user","content":"` + text + `"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":"x"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`
		},
		"chat_to_messages": func(text string) string {
			return `{"model":"m","max_tokens":1024,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],` +
				`"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"` + text + `"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":\"x\"}"}}]},{"role":"tool","tool_call_id":"t1","content":"ok"}]}`
		},
		"responses_to_chat": func(text string) string {
			return `{"model":"m","instructions":"You are an agent.","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],` +
				`"input":[{"role":"user","content":"` + text + `"},{"type":"function_call","call_id":"t1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"t1","output":"ok"}]}`
		},
	}
	pair := map[string][2]string{
		"messages_to_chat":  {config.FamilyAnthropicMessages, config.FamilyChatCompletions},
		"chat_to_messages":  {config.FamilyChatCompletions, config.FamilyAnthropicMessages},
		"responses_to_chat": {config.FamilyResponses, config.FamilyChatCompletions},
	}
	for name, mk := range bodies {
		tr := mustPair(b, pair[name][0], pair[name][1])
		for _, size := range []int{2 << 10, 64 << 10} {
			body := []byte(mk(strings.Repeat("word ", size/5)))
			b.Run(fmt.Sprintf("%s/%dKB", name, size>>10), func(b *testing.B) {
				if _, err := tr.Request(body, translate.RequestOptions{Model: "up"}); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					_, _ = tr.Request(body, translate.RequestOptions{Model: "up"})
				}
			})
		}
	}
}

// BenchmarkAgentRequest translates the agents' real tool-result turns (the
// golden fixtures): Claude Code's for a chat relay, Codex's with its
// namespace flattened and web_search dropped.
func BenchmarkAgentRequest(b *testing.B) {
	for _, c := range []struct {
		name, from, dir string
		o               translate.RequestOptions
	}{
		{"claude_code", config.FamilyAnthropicMessages, "../messageschat/testdata/anthropic_messages_to_chat_completions/claude_code_tool_result", translate.RequestOptions{Model: "up"}},
		{"codex", config.FamilyResponses, "../responseschat/testdata/responses_to_chat_completions/codex_tool_result", translate.RequestOptions{Model: "up", Hosted: translate.DropHosted}},
	} {
		tr := mustPair(b, c.from, config.FamilyChatCompletions)
		body, err := os.ReadFile(filepath.Join(c.dir, "request.in.json"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			if _, err := tr.Request(body, c.o); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tr.Request(body, c.o)
			}
		})
	}
}

// mustPair is the translator of a pair; the benchmark stops when it is
// missing.
func mustPair(tb testing.TB, from, to string) *translate.Translator {
	tb.Helper()
	tr := Lookup(from, to)
	if tr == nil {
		tb.Fatalf("%s → %s has no translator", from, to)
	}
	return tr
}
