package usage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// parseResult is everything StreamParser reports, for comparing runs.
type parseResult struct {
	usage       Usage
	hasU        bool
	provisional bool
	done        bool
	events      int
	bad         int
	delivered   int64
	err         string
	respID      string
}

func runParser(p *StreamParser, chunks [][]byte) parseResult {
	p.Reset()
	for _, c := range chunks {
		p.Write(c)
	}
	p.Flush()
	u, ok := p.Usage()
	r := parseResult{usage: u, hasU: ok, provisional: p.Provisional(), done: p.Done(), events: p.Events(), bad: p.BadEvents(), delivered: p.DeliveredContentBytes(),
		respID: string(p.ResponseID())}
	if err := p.Err(); err != nil {
		r.err = err.Error()
	}
	return r
}

func runFilter(f *StreamFilter, chunks [][]byte) ([]byte, int) {
	f.Reset()
	var out []byte
	for _, c := range chunks {
		out = append(out, f.Write(c)...)
	}
	out = append(out, f.Flush()...)
	return out, f.Removed()
}

// splits yields the stream cut at every offset into two pieces, then
// seeded random 3-7 way cuts, then one byte per chunk.
func splits(stream []byte, random int, yield func(name string, chunks [][]byte)) {
	for i := 0; i <= len(stream); i++ {
		yield(fmt.Sprintf("split@%d", i), [][]byte{clone(stream[:i]), clone(stream[i:])})
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(stream))))
	for n := 0; n < random; n++ {
		k := 3 + rng.IntN(5)
		cuts := make([]int, 0, k+1)
		for j := 0; j < k-1; j++ {
			cuts = append(cuts, rng.IntN(len(stream)+1))
		}
		cuts = append(cuts, 0, len(stream))
		sortInts(cuts)
		var chunks [][]byte
		for j := 1; j < len(cuts); j++ {
			chunks = append(chunks, clone(stream[cuts[j-1]:cuts[j]]))
		}
		yield(fmt.Sprintf("random%d", n), chunks)
	}
	var bytewise, withEmpty [][]byte
	for i := range stream {
		bytewise = append(bytewise, clone(stream[i:i+1]))
		withEmpty = append(withEmpty, clone(stream[i:i+1]), []byte{})
	}
	yield("bytewise", bytewise)
	yield("bytewise with empty chunks", withEmpty)
}

// clone gives each chunk its own backing array, so code that kept a chunk
// past Write would read garbage once it is overwritten.
func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func TestStreamFixtures(t *testing.T) {
	for name, want := range streamFixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream := readFixture(t, name)
			var p StreamParser
			got := runParser(&p, [][]byte{stream})
			if got.usage != want.usage || got.hasU != want.hasU {
				t.Errorf("usage = %+v, %v; want %+v, %v", got.usage, got.hasU, want.usage, want.hasU)
			}
			if got.done != want.done {
				t.Errorf("done = %v, want %v", got.done, want.done)
			}
			if (want.errHas == "") != (got.err == "") || !strings.Contains(got.err, want.errHas) {
				t.Errorf("err = %q, want one containing %q", got.err, want.errHas)
			}
			if got.bad != 0 {
				t.Errorf("bad events = %d", got.bad)
			}
			refDel, refEvents := refDelivered(t, stream)
			if got.delivered != refDel || got.events != refEvents {
				t.Errorf("delivered, events = %d, %d; reference %d, %d", got.delivered, got.events, refDel, refEvents)
			}

			var f StreamFilter
			out, removed := runFilter(&f, [][]byte{stream})
			refOut, refRemoved := refFilter(stream)
			if removed != want.removed || refRemoved != want.removed {
				t.Errorf("removed = %d (reference %d), want %d", removed, refRemoved, want.removed)
			}
			if !bytes.Equal(out, refOut) {
				t.Errorf("filter output differs from reference:\n got %q\nwant %q", out, refOut)
			}
			// What the client gets still parses to the same content.
			var p2 StreamParser
			after := runParser(&p2, [][]byte{out})
			if after.delivered != got.delivered || after.done != got.done {
				t.Errorf("filtered stream: delivered %d done %v; before %d %v", after.delivered, after.done, got.delivered, got.done)
			}

			splits(stream, 20, func(split string, chunks [][]byte) {
				if r := runParser(&p, chunks); r != got {
					t.Fatalf("%s: parser %+v, unsplit %+v", split, r, got)
				}
				if o, n := runFilter(&f, chunks); !bytes.Equal(o, out) || n != removed {
					t.Fatalf("%s: filter removed %d output\n%q\nunsplit removed %d output\n%q", split, n, o, removed, out)
				}
			})
		})
	}
}

func TestStreamParserCases(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   parseResult
	}{
		{"lone CR line ends", "data: {\"choices\":[{\"delta\":{\"content\":\"ab\"}}]}\r\rdata: [DONE]\r\r",
			parseResult{events: 2, done: true, delivered: 2}},
		{"no space after colon", "data:{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
			parseResult{events: 1, usage: Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}, hasU: true}},
		{"unterminated last event is flushed", "data: {\"choices\":[],\"usage\":{\"total_tokens\":5}}",
			parseResult{events: 1, usage: Usage{TotalTokens: 5}, hasU: true}},
		{"usage null ignored, last wins", "data: {\"usage\":{\"prompt_tokens\":1}}\n\ndata: {\"usage\":null}\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n",
			parseResult{events: 3, usage: Usage{PromptTokens: 2, TotalTokens: 2}, hasU: true}},
		{"malformed JSON counted", "data: {\"choices\":[\n\ndata: [DONE]\n\n",
			parseResult{events: 2, bad: 1, done: true}},
		{"escaped content decoded", `data: {"choices":[{"delta":{"content":"a\n\u00e9\ud83d\ude00\""}}]}` + "\n\n",
			parseResult{events: 1, delivered: 1 + 1 + 2 + 4 + 1}},
		{"comments and unknown fields only", ": hi\n\nid: 7\nretry: 10\nfoo\n\n", parseResult{}},
		{"error event with plain text", "event: error\ndata: overloaded\n\n", parseResult{events: 1, err: "upstream stream error: overloaded"}},
		{"responses API error event", "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR_SOMETHING\",\"message\":\"Something went wrong\",\"param\":null,\"sequence_number\":1}\n\n",
			parseResult{events: 1, err: "upstream stream error [ERR_SOMETHING]: Something went wrong"}},
		{"legacy function_call", `data: {"choices":[{"delta":{"function_call":{"name":"f","arguments":"{}"}}}]}` + "\n\n",
			parseResult{events: 1, delivered: 2}},
		{"anthropic-shaped usage", `data: {"usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":7}}` + "\n\n",
			parseResult{events: 1, usage: Usage{PromptTokens: 115, CompletionTokens: 7, TotalTokens: 122, CachedTokens: 100, CacheWriteTokens: 5}, hasU: true}},
		{"message_start usage is provisional", `data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}` + "\n\n",
			parseResult{events: 1, usage: Usage{PromptTokens: 25, CompletionTokens: 1, TotalTokens: 26}, hasU: true, provisional: true}},
		{"message_delta makes it final", `data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}` + "\n\n" +
			`data: {"type":"message_delta","usage":{"output_tokens":9}}` + "\n\n",
			parseResult{events: 2, usage: Usage{PromptTokens: 25, CompletionTokens: 9, TotalTokens: 34}, hasU: true}},
		{"reasoning beside completion", `data: {"choices":[],"usage":{"prompt_tokens":21,"completion_tokens":0,"total_tokens":81,"completion_tokens_details":{"reasoning_tokens":60}}}` + "\n\n",
			parseResult{events: 1, usage: Usage{PromptTokens: 21, CompletionTokens: 60, TotalTokens: 81, ReasoningTokens: 60}, hasU: true}},
		{"top-level usage after message.usage in one event wins", `data: {"message":{"usage":{"input_tokens":25,"output_tokens":1}},"usage":{"input_tokens":25,"output_tokens":4}}` + "\n\n",
			parseResult{events: 1, usage: Usage{PromptTokens: 25, CompletionTokens: 4, TotalTokens: 29}, hasU: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p StreamParser
			got := runParser(&p, [][]byte{[]byte(tt.stream)})
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			splits([]byte(tt.stream), 20, func(split string, chunks [][]byte) {
				if r := runParser(&p, chunks); r != got {
					t.Fatalf("%s: %+v, unsplit %+v", split, r, got)
				}
			})
		})
	}
}

func TestStreamParserEventCap(t *testing.T) {
	big := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", MaxEventBytes) + `"}}]}` + "\n\n"
	stream := []byte(big + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n")
	var p StreamParser
	for _, chunkSize := range []int{len(stream), 4096, 1000} {
		p.Reset()
		for i := 0; i < len(stream); i += chunkSize {
			p.Write(stream[i:min(i+chunkSize, len(stream))])
			if c := p.ev.Held(); c > 3*MaxEventBytes {
				t.Fatalf("chunk %d: buffers grew to %d bytes", chunkSize, c)
			}
		}
		if p.BadEvents() != 1 || !p.Done() || p.Events() != 3 || p.DeliveredContentBytes() != 0 {
			t.Errorf("chunk %d: bad %d done %v events %d delivered %d", chunkSize, p.BadEvents(), p.Done(), p.Events(), p.DeliveredContentBytes())
		}
		if u, ok := p.Usage(); !ok || u.PromptTokens != 1 {
			t.Errorf("chunk %d: usage after dropped event = %+v %v", chunkSize, u, ok)
		}
	}
}

// A Responses API stream whose last event restates an answer above the
// event cap: its usage and its end are read from the event's two ends, at
// any chunking; a usage that is not the response's own is not taken.
func TestStreamParserCutResponseCompleted(t *testing.T) {
	text := strings.Repeat(`word \"usage\":{\"input_tokens\":9} `, MaxEventBytes/30)
	completed := func(usage, after string) string {
		return `event: response.completed` + "\n" + `data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response",` +
			`"output":[{"type":"message","content":[{"type":"output_text","text":"` + text + `"}]}],` + usage + after + "}}\n\n"
	}
	open := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"word \"}\n\n"
	usage := `"usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":200},"output_tokens":300000,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":301200}`
	for _, tt := range []struct {
		name, stream string
		want         int64 // output tokens; 0: no usage
		done         bool
	}{
		{"usage then the response's last members", open + completed(usage, `,"user":null,"metadata":{"k":"v"}`), 300000, true},
		{"usage last", open + completed(usage, ""), 300000, true},
		{"null usage", open + completed(`"usage":null`, `,"user":null`), 0, true},
		{"usage only deeper", open + completed(`"metadata":{"usage":{"output_tokens":5}}`, ""), 0, true},
		{"keys sorted: the type after the response", open + "data: {\"response\":{\"output\":[\"" + text + "\"]," + usage + "},\"sequence_number\":9,\"type\":\"response.completed\"}\n\n", 300000, true},
		{"another event type", open + strings.Replace(completed(usage, ""), `"type":"response.completed"`, `"type":"response.output_item.done"`, 1), 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream := []byte(tt.stream)
			var p StreamParser
			for _, size := range []int{len(stream), 65536, 4096, 1000} {
				p.Reset()
				for i := 0; i < len(stream); i += size {
					p.Write(stream[i:min(i+size, len(stream))])
				}
				p.Flush()
				u, ok := p.Usage()
				if ok != (tt.want > 0) || u.CompletionTokens != tt.want || p.Done() != tt.done {
					t.Fatalf("chunks of %d: usage %+v %v, done %v; want %d output tokens, done %v", size, u, ok, p.Done(), tt.want, tt.done)
				}
				if ok && (u.PromptTokens != 1200 || u.CachedTokens != 200) {
					t.Fatalf("chunks of %d: usage %+v", size, u)
				}
				if string(p.ResponseID()) != "resp_1" || p.DeliveredContentBytes() != 5 {
					t.Fatalf("chunks of %d: response id %q, delivered %d", size, p.ResponseID(), p.DeliveredContentBytes())
				}
				if c := p.ev.Held(); c > 3*MaxEventBytes {
					t.Fatalf("chunks of %d: buffers grew to %d bytes", size, c)
				}
			}
		})
	}
}

func TestStreamFilterCases(t *testing.T) {
	usageOnly := `data: {"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n"
	content := `data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` + "\n\n"
	tests := []struct {
		name, stream, want string
	}{
		{"usage chunk removed", content + usageOnly + "data: [DONE]\n\n", content + "data: [DONE]\n\n"},
		{"choices with usage kept", `data: {"choices":[{"delta":{}}],"usage":{"total_tokens":3}}` + "\n\n", `data: {"choices":[{"delta":{}}],"usage":{"total_tokens":3}}` + "\n\n"},
		{"empty choices without usage kept (Azure prompt filter chunk)", `data: {"choices":[],"prompt_filter_results":[]}` + "\n\n", `data: {"choices":[],"prompt_filter_results":[]}` + "\n\n"},
		{"usage null kept", `data: {"choices":[],"usage":null}` + "\n\n", `data: {"choices":[],"usage":null}` + "\n\n"},
		{"unterminated usage chunk at end removed", content + strings.TrimSuffix(usageOnly, "\n\n"), content},
		{"CRLF usage chunk removed", strings.ReplaceAll(content+usageOnly+"data: [DONE]\n\n", "\n", "\r\n"), strings.ReplaceAll(content+"data: [DONE]\n\n", "\n", "\r\n")},
		{"lone CR usage chunk removed", strings.ReplaceAll(content+usageOnly+"data: [DONE]\n\n", "\n", "\r"), strings.ReplaceAll(content+"data: [DONE]\n\n", "\n", "\r")},
		{"multi-line data usage chunk removed", "data: {\"choices\":[],\ndata: \"usage\":{\"total_tokens\":1}}\n\n" + content, content},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f StreamFilter
			got, _ := runFilter(&f, [][]byte{[]byte(tt.stream)})
			if string(got) != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
			if ref, _ := refFilter([]byte(tt.stream)); string(ref) != tt.want {
				t.Fatalf("reference disagrees: %q", ref)
			}
			splits([]byte(tt.stream), 50, func(split string, chunks [][]byte) {
				if o, _ := runFilter(&f, chunks); string(o) != tt.want {
					t.Fatalf("%s: %q", split, o)
				}
			})
		})
	}
}

// TestStreamFilterPassThrough: chunks holding whole events, or a partial
// event already known to carry choices, come back as the very same slice.
func TestStreamFilterPassThrough(t *testing.T) {
	stream := readFixture(t, "openai_chat_include_usage.sse")
	blocks := refBlocks(stream)
	var f StreamFilter
	for i, b := range blocks[:len(blocks)-2] { // all but the usage chunk and [DONE]
		got := f.Write(b)
		if len(got) != len(b) || &got[0] != &b[0] {
			t.Fatalf("block %d: output is a copy or differs", i)
		}
	}
	// A content event split after its choices array opened: the first part
	// is forwarded at once, as a subslice, not held.
	b := blocks[3]
	cut := bytes.Index(b, []byte(`"delta"`))
	if got := f.Write(b[:cut]); len(got) != cut || &got[0] != &b[0] {
		t.Fatalf("partial content event held back (%d of %d bytes forwarded)", len(got), cut)
	}
	if got := f.Write(b[cut:]); len(got) != len(b)-cut || &got[0] != &b[cut] {
		t.Fatal("rest of content event not passed through")
	}
}
