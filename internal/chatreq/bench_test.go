package chatreq

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/cpuclock"
)

// agentBody builds a chat request of about size bytes shaped like an agent
// swarm's: a system prompt, tool schemas, then alternating tool calls and
// tool results (code with escapes), user turns in English and some CJK.
func agentBody(size int) []byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCalls  []call `json:"tool_calls,omitempty"`
		ToolCallID string `json:"tool_call_id,omitempty"`
	}
	code := "func (s *Server) handle(ctx context.Context, req *Request) (*Response, error) {\n\tif req == nil {\n\t\treturn nil, fmt.Errorf(\"nil request: %w\", ErrBadRequest)\n\t}\n\tresp, err := s.backend.Do(ctx, req)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\treturn resp, nil\n}\n"
	msgs := []msg{{Role: "system", Content: "You are a coding agent working in a Go repository. Use the tools; keep edits minimal; run the tests."}}
	next := 1 // marshal at 1, 2, 4, ... turns: linear, not quadratic
	for i := 0; ; i++ {
		msgs = append(msgs,
			msg{Role: "user", Content: fmt.Sprintf("Step %d: the handler returns 500 when the backend times out; make it return 504 and add a test. 请同时更新文档。", i)},
			msg{Role: "assistant", Content: nil, ToolCalls: []call{{ID: fmt.Sprintf("call_%d", i), Type: "function", Function: fn{Name: "read_file", Arguments: `{"path":"internal/server/handle.go","start":1,"end":80}`}}}},
			msg{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", i), Content: strings.Repeat(code, 3)},
			msg{Role: "assistant", Content: []map[string]string{{"type": "text", "text": "The error from s.backend.Do is returned unchanged, so a context deadline becomes a 500. I will map context.DeadlineExceeded to 504."}}},
		)
		if i+1 < next {
			continue
		}
		next *= 2
		b, _ := json.Marshal(map[string]any{
			"model": "gpt-4o", "stream": true, "max_tokens": 4096, "messages": msgs,
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "read_file", "parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]string{"type": "string"}}}}}},
		})
		if len(b) >= size {
			return b
		}
	}
}

var benchSizes = []struct {
	name string
	size int
}{{"2KB", 2 << 10}, {"64KB", 64 << 10}, {"1MB", 1 << 20}}

// benchAgentBodies runs op on agent bodies of each size, reporting MB/s
// of wall and of CPU time.
func benchAgentBodies(b *testing.B, op func(body []byte) error) {
	for _, sz := range benchSizes {
		body := agentBody(sz.size)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			start := cpuclock.Start()
			for b.Loop() {
				if err := op(body); err != nil {
					b.Fatal(err)
				}
			}
			cpuclock.ReportMBps(b, start, len(body))
		})
	}
}

func BenchmarkScan(b *testing.B) {
	benchAgentBodies(b, func(body []byte) error { _, err := Scan(body); return err })
}

// BenchmarkScanStdlib is the yardstick: encoding/json.Valid alone, which
// only validates.
func BenchmarkScanStdlibValid(b *testing.B) {
	benchAgentBodies(b, func(body []byte) error {
		if !json.Valid(body) {
			return errors.New("invalid")
		}
		return nil
	})
}

func BenchmarkSetIncludeUsage(b *testing.B) {
	benchAgentBodies(b, func(body []byte) error { _, err := SetIncludeUsage(body); return err })
}

// BenchmarkScanWithIncludeUsage is the streaming request path: one Scan,
// then the splice from its recorded positions (no second pass).
func BenchmarkScanWithIncludeUsage(b *testing.B) {
	benchAgentBodies(b, func(body []byte) error {
		r, err := Scan(body)
		if err == nil {
			_ = r.WithIncludeUsage(body)
		}
		return err
	})
}

func BenchmarkSetModel(b *testing.B) {
	body := agentBody(64 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	start := cpuclock.Start()
	for b.Loop() {
		if _, err := SetModel(body, "gpt-4o-2024-08-06"); err != nil {
			b.Fatal(err)
		}
	}
	cpuclock.ReportMBps(b, start, len(body))
}

func TestAgentBodyScans(t *testing.T) {
	for _, sz := range benchSizes {
		body := agentBody(sz.size)
		r, err := Scan(body)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Stream || !r.HasTools || r.MaxTokens != 4096 || r.Messages < 5 || r.PromptBytes < len(body)/2 {
			t.Errorf("%s: %+v", sz.name, r)
		}
		allocs := testing.AllocsPerRun(3, func() { _, _ = Scan(body) })
		if allocs > 1 {
			t.Errorf("%s: Scan allocates %.0f times, want at most 1 (the model string)", sz.name, allocs)
		}
	}
}

func TestScanOneAllocation(t *testing.T) {
	for _, body := range []string{
		`{"model":"gpt-4o","user":"user-1234","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt\u002d4o","user":"us\u00e9r","messages":[]}`,
	} {
		b := []byte(body)
		r, err := Scan(b)
		if err != nil || r.Model == "" || r.User == "" {
			t.Fatalf("%s: %+v %v", body, r, err)
		}
		if a := testing.AllocsPerRun(10, func() { _, _ = Scan(b) }); a > 1 {
			t.Errorf("%s: %.0f allocations, want 1 for model and user together", body, a)
		}
	}
}

// proseBody is a chat of English prose turns, few escapes.
func proseBody(size int) []byte {
	const para = "The history of the printing press is usually told as a story about one man and one machine, but the reality was slower and messier. Block printing had been practised in East Asia for centuries, and movable type appeared in China and Korea well before the fifteenth century. "
	var msgs []map[string]string
	for n := 0; n < size; n += 4 * len(para) {
		msgs = append(msgs, map[string]string{"role": "user", "content": strings.Repeat(para, 4)})
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	return b
}

func BenchmarkScanProse(b *testing.B) {
	for _, sz := range benchSizes {
		body := proseBody(sz.size)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			start := cpuclock.Start()
			for b.Loop() {
				if _, err := Scan(body); err != nil {
					b.Fatal(err)
				}
			}
			cpuclock.ReportMBps(b, start, len(body))
		})
	}
}

var sink int

// BenchmarkYardstickByteLoop sums 1 MB byte by byte: what one core of the
// machine running the benchmarks does with the simplest possible loop.
func BenchmarkYardstickByteLoop(b *testing.B) {
	buf := agentBody(1 << 20)
	b.SetBytes(int64(len(buf)))
	start := cpuclock.Start()
	for b.Loop() {
		sink = sumBytes(buf)
	}
	cpuclock.ReportMBps(b, start, len(buf))
}

// sumBytes is outside the b.Loop body, which the compiler keeps from
// optimizing like ordinary code.
//
//go:noinline
func sumBytes(buf []byte) int {
	s := 0
	for _, c := range buf {
		s += int(c)
	}
	return s
}
