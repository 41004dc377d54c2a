package extproc

import (
	"bytes"
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
		{"a value that looks like the key", `{"a":"model","b":"model" ,"model" : "x"}`, `{"a":"model","b":"model" ,"model" : "gpt-relay"}`},
		{"prefix of the key then the key", `{"a":"mo","model":"x"}`, `{"a":"mo","model":"gpt-relay"}`},
		{"a tool's input keeps its model", `{"model":"m","content":[{"type":"tool_use","input":{"model":"keep","n":[{"model":"keep"}]}}]}`,
			`{"model":"gpt-relay","content":[{"type":"tool_use","input":{"model":"keep","n":[{"model":"keep"}]}}]}`},
		{"metadata keeps its model", `{"id":"r","metadata":{"model":"keep"},"model":"m"}`, `{"id":"r","metadata":{"model":"keep"},"model":"gpt-relay"}`},
		{"Responses event", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"m\",\"metadata\":{\"model\":\"keep\"}}}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-relay\",\"metadata\":{\"model\":\"keep\"}}}\n\n"},
		{"an object under another key keeps its model", `{"usage":{"model":"keep"},"message":"text","x":{"model":"keep"}}`, `{"usage":{"model":"keep"},"message":"text","x":{"model":"keep"}}`},
		{"an escaped key is not the key", `{"mod\u0065l":"keep","model":"m"}`, `{"mod\u0065l":"keep","model":"gpt-relay"}`},
		{"a string with braces", `{"content":"{\"model\":\"x\"} [","model":"m"}`, `{"content":"{\"model\":\"x\"} [","model":"gpt-relay"}`},
		{"a top-level array is no answer", `[{"model":"keep"}]`, `[{"model":"keep"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m modelNamer
			// Every split into two chunks, and one byte at a time: nothing
			// is held back, so each chunk's output stands on its own.
			for cut := 0; cut <= len(tc.in); cut++ {
				m.reset("gpt-relay")
				got := write(&m, tc.in[:cut]) + write(&m, tc.in[cut:])
				if got != tc.want {
					t.Fatalf("cut at %d:\n got %s\nwant %s", cut, got, tc.want)
				}
			}
			m.reset("gpt-relay")
			var b strings.Builder
			for i := range len(tc.in) {
				b.WriteString(write(&m, tc.in[i:i+1]))
			}
			if b.String() != tc.want {
				t.Fatalf("byte by byte:\n got %s\nwant %s", b.String(), tc.want)
			}
		})
	}
}

// write is one Write, copied (the result is reused by the next).
func write(m *modelNamer, chunk string) string {
	out, changed := m.Write([]byte(chunk))
	if !changed && string(out) != chunk {
		panic("unchanged output differs")
	}
	return string(out)
}

// A long old value cut across many chunks is dropped as it passes; what
// follows it is kept.
func TestModelNamerLongValue(t *testing.T) {
	var m modelNamer
	m.reset("a")
	in := `{"model":"` + strings.Repeat("x", 5000) + `\"y","next":1}`
	var b strings.Builder
	for i := 0; i < len(in); i += 100 {
		b.WriteString(write(&m, in[i:min(i+100, len(in))]))
	}
	if b.String() != `{"model":"a","next":1}` {
		t.Fatalf("got %s", b.String())
	}
}

// Most chunks of a stream name the model: renaming them allocates nothing
// once the stream's buffers have grown.
func TestModelNamerAllocations(t *testing.T) {
	var m modelNamer
	chunk := []byte(strings.Repeat("data: {\"id\":\"c\",\"model\":\"relay-model\",\"choices\":[{\"delta\":{\"content\":\"hello world \"}}]}\n\n", 100))
	m.reset("gpt-relay")
	m.Write(chunk)
	if n := testing.AllocsPerRun(100, func() { m.Write(chunk) }); n != 0 {
		t.Fatalf("%v allocations per chunk", n)
	}
}

func FuzzIndexEither(f *testing.F) {
	for _, s := range []string{"", `"`, `\`, `abc"def\`, `abc\def"`, "no stop here", `{"a":[1]}`, "data: {"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, set := range [][2]byte{{'"', '\\'}, {'{', '['}} {
			if got, want := indexEither(b, set[0], set[1]), bytes.IndexAny(b, string(set[:])); got != want {
				t.Fatalf("indexEither(%q, %q) = %d, IndexAny %d", b, set[:], got, want)
			}
		}
	})
}
