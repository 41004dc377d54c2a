package extproc

import (
	"strings"
	"testing"
)

func TestModelNamer(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"chat JSON", `{"id":"c1","object":"chat.completion","model":"relay-model","choices":[]}`,
			`{"id":"c1","object":"chat.completion","model":"gpt-relay","choices":[]}`},
		{"SSE chunks", "data: {\"id\":\"c\",\"model\":\"relay-model\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"id\":\"c\",\"model\":\"relay-model-2024-07-18\",\"choices\":[]}\n\ndata: [DONE]\n\n",
			"data: {\"id\":\"c\",\"model\":\"gpt-relay\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
				"data: {\"id\":\"c\",\"model\":\"gpt-relay\",\"choices\":[]}\n\ndata: [DONE]\n\n"},
		{"Anthropic message_start, nested, spaced", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\", \"model\" : \"claude-x\"}}\n\n",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\", \"model\" : \"gpt-relay\"}}\n\n"},
		{"escaped value", `{"model":"a\"b\\","x":1}`, `{"model":"gpt-relay","x":1}`},
		{"not a string", `{"model":null,"usage":{"model":{"a":1}},"model":"m"}`, `{"model":null,"usage":{"model":{"a":1}},"model":"gpt-relay"}`},
		{"inside a string: untouched", `{"content":"say \"model\":\"x\"","model":"m"}`, `{"content":"say \"model\":\"x\"","model":"gpt-relay"}`},
		{"no model", `{"error":{"message":"nope"}}`, `{"error":{"message":"nope"}}`},
		{"key at the very end", `{"a":"model"`, `{"a":"model"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m modelNamer
			// Every split into two chunks, and one byte at a time.
			for cut := 0; cut <= len(tc.in); cut++ {
				m.reset("gpt-relay")
				got := write(&m, tc.in[:cut], false) + write(&m, tc.in[cut:], true)
				if got != tc.want {
					t.Fatalf("cut at %d:\n got %s\nwant %s", cut, got, tc.want)
				}
			}
			m.reset("gpt-relay")
			var b strings.Builder
			for i := range len(tc.in) {
				b.WriteString(write(&m, tc.in[i:i+1], i == len(tc.in)-1))
			}
			if b.String() != tc.want {
				t.Fatalf("byte by byte:\n got %s\nwant %s", b.String(), tc.want)
			}
		})
	}
}

// write is one Write, copied (the result is reused by the next).
func write(m *modelNamer, chunk string, end bool) string {
	out, changed := m.Write([]byte(chunk), end)
	if !changed && string(out) != chunk {
		panic("unchanged output differs")
	}
	return string(out)
}

// A value longer than the hold bound is left as the backend wrote it
// rather than held without limit.
func TestModelNamerBoundsItsHold(t *testing.T) {
	var m modelNamer
	m.reset("a")
	long := `{"model":"` + strings.Repeat("x", 2*maxModelHold)
	out, _ := m.Write([]byte(long), false)
	if string(out) != long {
		t.Fatalf("held back %d bytes of a %d-byte value", len(long)-len(out), len(long))
	}
	rest, _ := m.Write([]byte(`"}`), true)
	if string(rest) != `"}` {
		t.Fatalf("rest %q", rest)
	}
}

// Most chunks of a stream name the model: renaming them allocates nothing
// once the stream's buffers have grown.
func TestModelNamerAllocations(t *testing.T) {
	var m modelNamer
	chunk := []byte(strings.Repeat("data: {\"id\":\"c\",\"model\":\"relay-model\",\"choices\":[{\"delta\":{\"content\":\"hello world \"}}]}\n\n", 100))
	m.reset("gpt-relay")
	m.Write(chunk, false)
	if n := testing.AllocsPerRun(100, func() { m.Write(chunk, false) }); n != 0 {
		t.Fatalf("%v allocations per chunk", n)
	}
}
