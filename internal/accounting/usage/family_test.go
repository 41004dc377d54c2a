package usage

import (
	"bytes"
	"os"
	"testing"
)

// TestFamilyStreams reads the recorded-shape streams of the Responses API
// and Anthropic Messages (shapes from the providers' API references) in
// every chunking: usage and delivered bytes must not depend on where the
// chunks are cut.
func TestFamilyStreams(t *testing.T) {
	for _, tc := range []struct {
		file      string
		want      Usage
		delivered int64
	}{
		// Anthropic: input 25 + cache read 5 + cache write 10; output from
		// the cumulative message_delta, not message_start's 1.
		{"anthropic_messages.sse", Usage{PromptTokens: 40, CompletionTokens: 15, TotalTokens: 55, CachedTokens: 5, CacheWriteTokens: 10}, 6},
		{"responses.sse", Usage{PromptTokens: 36, CompletionTokens: 87, TotalTokens: 123, CachedTokens: 8, ReasoningTokens: 12}, 8},
	} {
		body, err := os.ReadFile("testdata/families/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 7, 64, len(body)} {
			var p StreamParser
			for i := 0; i < len(body); i += size {
				p.Write(body[i:min(i+size, len(body))])
			}
			p.Flush()
			u, ok := p.Usage()
			if !ok || u != tc.want || p.DeliveredContentBytes() != tc.delivered || p.BadEvents() != 0 {
				t.Errorf("%s in %d-byte chunks: usage %+v %v, delivered %d, bad %d; want %+v, %d", tc.file, size, u, ok,
					p.DeliveredContentBytes(), p.BadEvents(), tc.want, tc.delivered)
			}
		}
	}
}

// TestFamilyStreamZeroAllocs: the passthrough families' streams cost no
// allocation per chunk either.
func TestFamilyStreamZeroAllocs(t *testing.T) {
	for _, f := range []string{"anthropic_messages.sse", "responses.sse"} {
		body, err := os.ReadFile("testdata/families/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var p StreamParser
		run := func() {
			p.Reset()
			for i := 0; i < len(body); i += 37 {
				p.Write(body[i:min(i+37, len(body))])
			}
			p.Flush()
		}
		run()
		if a := testing.AllocsPerRun(20, run); a != 0 {
			t.Errorf("%s: %.1f allocations per stream, want 0", f, a)
		}
	}
}

func TestAnthropicJSON(t *testing.T) {
	body := []byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"model":"claude","stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":6}}`)
	u, ok := FromJSON(body)
	if want := (Usage{PromptTokens: 16, CompletionTokens: 6, TotalTokens: 22, CachedTokens: 4}); !ok || u != want {
		t.Errorf("FromJSON = %+v %v, want %+v", u, ok, want)
	}
}

// TestStreamDone: each family's last event ends the stream, a stream cut
// before it does not (extproc tells a complete answer whose connection the
// SDK closed from a disconnect by it).
func TestStreamDone(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		done         bool
	}{
		{"chat [DONE]", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", true},
		{"chat cut", "data: {\"choices\":[]}\n\n", false},
		{"Anthropic message_stop", "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"Anthropic cut after message_delta", "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n", false},
		{"Responses completed", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\"}}\n\n", true},
		{"Responses incomplete", "data: {\"type\":\"response.incomplete\",\"response\":{}}\n\n", true},
		{"Responses cut", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n", false},
		{"a nested type is not the event's", "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"message_stop\"}}\n\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p StreamParser
			p.Write([]byte(tc.stream))
			p.Flush()
			if p.Done() != tc.done {
				t.Errorf("Done() = %v, want %v", p.Done(), tc.done)
			}
		})
	}
}

// TestStreamProvisional: Anthropic's message_start usage is provisional
// until message_delta states the answer's output: a stream cut or ended by
// an error event before it has the prompt reported and the output not
// (extproc bills that output by what was delivered). Every chunking agrees.
func TestStreamProvisional(t *testing.T) {
	body, err := os.ReadFile("testdata/families/anthropic_messages.sse")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) int {
		i := bytes.Index(body, []byte(s))
		if i < 0 {
			t.Fatalf("fixture lacks %q", s)
		}
		return i
	}
	overloaded := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	opening := Usage{PromptTokens: 40, CompletionTokens: 1, TotalTokens: 41, CachedTokens: 5, CacheWriteTokens: 10}
	final := Usage{PromptTokens: 40, CompletionTokens: 15, TotalTokens: 55, CachedTokens: 5, CacheWriteTokens: 10}
	for _, tc := range []struct {
		name        string
		stream      string
		want        Usage
		provisional bool
		errors      bool
	}{
		{"cut after message_start", string(body[:at("event: content_block_start")]), opening, true, false},
		{"cut before message_delta", string(body[:at("event: message_delta")]), opening, true, false},
		{"error before message_delta", string(body[:at("event: message_delta")]) + overloaded, opening, true, true},
		{"cut after message_delta", string(body[:at("event: message_stop")]), final, false, false},
		{"whole stream", string(body), final, false, false},
		{"chat usage chunk", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
			Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}, false, false},
		{"no usage", "data: {\"choices\":[]}\n\n", Usage{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p StreamParser
			got := runParser(&p, [][]byte{[]byte(tc.stream)})
			if got.usage != tc.want || got.provisional != tc.provisional || (got.err != "") != tc.errors {
				t.Fatalf("usage %+v provisional %v err %q; want %+v %v, error %v", got.usage, got.provisional, got.err,
					tc.want, tc.provisional, tc.errors)
			}
			splits([]byte(tc.stream), 10, func(split string, chunks [][]byte) {
				if r := runParser(&p, chunks); r != got {
					t.Fatalf("%s: %+v, unsplit %+v", split, r, got)
				}
			})
		})
	}
}

// TestAnthropicDeltaMergesCounts: message_delta's usage is merged count by
// count into message_start's, as Anthropic's SDK merges it: a delta that
// restates input_tokens without the cache counts keeps them.
func TestAnthropicDeltaMergesCounts(t *testing.T) {
	start := `event: message_start` + "\n" +
		`data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":1}}}` + "\n\n"
	delta := func(usage string) string {
		return "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":" + usage + "}\n\n"
	}
	final := Usage{PromptTokens: 3210, CompletionTokens: 50, TotalTokens: 3260, CachedTokens: 3000, CacheWriteTokens: 200}
	for _, tc := range []struct {
		name, stream string
		want         Usage
	}{
		{"delta restates input only", start + delta(`{"input_tokens":10,"output_tokens":50}`), final},
		{"delta states output only", start + delta(`{"output_tokens":50}`), final},
		{"delta restates every count", start + delta(`{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":50}`), final},
		{"delta with null cache counts", start + delta(`{"input_tokens":10,"cache_creation_input_tokens":null,"cache_read_input_tokens":null,"output_tokens":50}`), final},
		{"delta changes a cache count", start + delta(`{"cache_read_input_tokens":2500,"output_tokens":50}`),
			Usage{PromptTokens: 2710, CompletionTokens: 50, TotalTokens: 2760, CachedTokens: 2500, CacheWriteTokens: 200}},
		{"type after usage", start + "data: {\"usage\":{\"input_tokens\":10,\"output_tokens\":50},\"type\":\"message_delta\"}\n\n", final},
		// Other families' usage events replace what came before.
		{"chat usage chunks replace", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens\":1}}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n", Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p StreamParser
			got := runParser(&p, [][]byte{[]byte(tc.stream)})
			if got.usage != tc.want || !got.hasU || got.provisional {
				t.Fatalf("usage %+v (has %v, provisional %v), want %+v", got.usage, got.hasU, got.provisional, tc.want)
			}
			splits([]byte(tc.stream), 10, func(split string, chunks [][]byte) {
				if r := runParser(&p, chunks); r != got {
					t.Fatalf("%s: %+v, unsplit %+v", split, r, got)
				}
			})
		})
	}
}
