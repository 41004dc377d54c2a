package chatmessages

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/internal/translatetest"
	"github.com/swarmgate/swarmgate/internal/config"
)

func TestChatMessagesGolden(t *testing.T) {
	translatetest.RunGoldens(t, New())
}

func TestChatMessagesRegistered(t *testing.T) {
	tr := New()
	if tr.Path != "/v1/messages" {
		t.Fatalf("path %q", tr.Path)
	}
	b := config.Backend{Families: []string{config.FamilyAnthropicMessages}}
	if to, ok := b.Route(config.FamilyChatCompletions); !ok || to != tr.To {
		t.Fatalf("an Anthropic backend takes chat completions as %q, %v", to, ok)
	}
}

// TestChatMessagesRequestRefusals names the field of every refusal the
// goldens do not show.
func TestChatMessagesRequestRefusals(t *testing.T) {
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ body, param string }{
		{`{` + user + `,"logprobs":true}`, "logprobs"},
		{`{` + user + `,"top_logprobs":3}`, "top_logprobs"},
		{`{` + user + `,"audio":{"voice":"alloy","format":"wav"}}`, "audio"},
		{`{` + user + `,"modalities":["text","audio"]}`, "modalities"},
		{`{` + user + `,"response_format":{"type":"json_object"}}`, "response_format"},
		{`{` + user + `,"prediction":{"type":"content","content":"x"}}`, "prediction"},
		{`{` + user + `,"presence_penalty":0.5}`, "presence_penalty"},
		{`{` + user + `,"frequency_penalty":-0.5}`, "frequency_penalty"},
		{`{` + user + `,"logit_bias":{"50256":-100}}`, "logit_bias"},
		{`{` + user + `,"function_call":"auto"}`, "function_call"},
		{`{` + user + `,"web_search_options":{}}`, "web_search_options"},
		{`{` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`, "tool_choice.type"},
		{`{` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, "tool_choice"},
		{`{"messages":[{"role":"function","name":"f","content":"x"}]}`, "messages[0].role"},
		{`{"messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}]}`, "messages[0].function_call"},
		{`{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, "messages[0].content[0].type"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "messages[0].content[0].type"},
		{`{"messages":[{"role":"assistant","audio":{"id":"audio_abc"}}]}`, "messages[0].audio"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"x","input":"y"}}]}]}`, "messages[0].tool_calls[0].type"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"x","arguments":"{broken"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{"messages":[{"role":"critic","content":"x"}]}`, "messages[0].role"},
		{`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure."},{"role":"system","content":"s"},{"role":"assistant","content":""}]}`, "messages[1].role"},
		{`{"messages":"hello"}`, "messages"},
		{`{"messages":[{"role":"user","content":"hi"}],"user":5}`, "user"},
		{`{"messages":[{"role":7}]}`, "messages.role"},
		{`{"messages":[{"role":"user","content":"hi"}]`, ""},
		{`{` + user + `,"tools":[{"type":"function","function":{"name":"f","parameters":"object"}}]}`, "tools[0].function.parameters"},
	} {
		_, err := translateRequest([]byte(c.body), translate.RequestOptions{Model: "m", DefaultMaxTokens: 100})
		var un *translate.Unsupported
		if !errors.As(err, &un) {
			t.Errorf("%s: err %v, want an Unsupported", c.body, err)
			continue
		}
		if un.Param != c.param {
			t.Errorf("%s: param %q, want %q (%s)", c.body, un.Param, c.param, un.Message)
		}
	}
}

func TestChatMessagesRequestDetails(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"fallback max_tokens", `{"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":4096}`},
		{"safety_identifier as user id, nulls as absent", `{"safety_identifier":"u-9","temperature":null,"stop":null,"tool_choice":null,"response_format":null,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":4096,"metadata":{"user_id":"u-9"}}`},
		{"tool results before the user's text in a merged turn", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"b"},{"role":"tool","tool_call_id":"c1","content":""}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1"},{"type":"text","text":"b"}]}],"max_tokens":4096}`},
		{"empty turns dropped, same roles merged", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"user","content":[{"type":"text","text":"b"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":4096}`},
		{"tool_choice without tools dropped", `{"tool_choice":"required","parallel_tool_calls":false,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":4096}`},
	} {
		got, err := translateRequest([]byte(c.body), translate.RequestOptions{Model: "m"})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestChatMessagesStreamCut(t *testing.T) {
	r := newResponse(translate.ResponseOptions{Stream: true, Status: 200, Created: 1})
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"c\",\"usage\":{\"input_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
	out, err := r.Write(nil, []byte(in), true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(out), `data: {"error":{"message":"`+cutMessage+`","type":"api_error","param":null,"code":null}}`+"\n\n") {
		t.Fatalf("a cut stream must end in an error event:\n%s", out)
	}
	if bytes.Contains(out, []byte("[DONE]")) {
		t.Fatalf("a cut stream must not end cleanly:\n%s", out)
	}
}

func TestChatMessagesResponseNotAnthropic(t *testing.T) {
	r := newResponse(translate.ResponseOptions{Status: 200})
	if _, err := r.Write(nil, []byte("<html>"), true); err == nil {
		t.Fatal("a body that is not JSON must be an error")
	}
	s := newResponse(translate.ResponseOptions{Status: 200, Stream: true})
	if _, err := s.Write(nil, []byte("data: {nope\n\n"), false); err == nil {
		t.Fatal("an event that is not JSON must be an error")
	}
}

// checkSSE fails unless out is data lines of JSON (or [DONE])
// each followed by a blank line.
func checkSSE(t *testing.T, out []byte) {
	t.Helper()
	for _, ev := range strings.SplitAfter(string(out), "\n\n") {
		if ev == "" {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		data, ok2 := strings.CutSuffix(data, "\n\n")
		if !ok || !ok2 || strings.ContainsAny(data, "\r\n") {
			t.Fatalf("not one data line: %q", ev)
		}
		if data != "[DONE]" && !json.Valid([]byte(data)) {
			t.Fatalf("not JSON: %q", data)
		}
	}
}

func FuzzChatMessagesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"stop":["x"],"max_tokens":5}`,
		`{"messages":[{"role":"developer","content":[{"type":"text","text":"d"}]}],"temperature":0.5,"user":"u"}`,
		`{"messages":[],"n":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := translateRequest(body, translate.RequestOptions{Model: "m", DefaultMaxTokens: 64})
		if err != nil {
			var un *translate.Unsupported
			if !errors.As(err, &un) {
				t.Fatalf("error %v is not an Unsupported", err)
			}
			return
		}
		var v struct {
			Model     string            `json:"model"`
			MaxTokens int               `json:"max_tokens"`
			Messages  []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		if v.Model != "m" || v.Messages == nil {
			t.Fatalf("output lacks model or messages: %s", out)
		}
	})
}

func FuzzChatMessagesResponseSSE(f *testing.F) {
	for _, name := range []string{"stream_text_usage", "stream_tool_use", "stream_tool_use_no_arguments", "stream_overloaded_error", "thinking_dropped"} {
		if b, err := readChatMessagesCase(name, "response.in.sse"); err == nil {
			f.Add(b, uint8(7), true)
		}
	}
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n"), uint8(1), false)
	f.Fuzz(func(t *testing.T, in []byte, size uint8, usage bool) {
		o := translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: usage, RequestID: "r", Created: 1}
		run := func(n int) ([]byte, error) {
			r := newResponse(o)
			var out []byte
			var err error
			if len(in) == 0 {
				return r.Write(nil, nil, true)
			}
			for i := 0; i < len(in); i += n {
				j := min(i+n, len(in))
				if out, err = r.Write(out, in[i:j], j == len(in)); err != nil {
					return out, err
				}
			}
			return out, nil
		}
		whole, werr := run(len(in) + 1)
		checkSSE(t, whole)
		n := int(size)%64 + 1
		got, gerr := run(n)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("chunks of %d: error %v, whole: %v", n, gerr, werr)
		}
		if werr == nil && !bytes.Equal(got, whole) {
			t.Fatalf("chunks of %d translate differently:\n%s\nwhole:\n%s", n, got, whole)
		}
	})
}

// BenchmarkChatMessagesSSEChunk is the cost of one upstream chunk holding
// one typical text delta event.
func BenchmarkChatMessagesSSEChunk(b *testing.B) {
	r := newResponse(translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, Created: 1764806400})
	start := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01RnXXtUnT5sR3xn3DmsYtmX\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" the quick brown fox jumps\"}}\n\n")
	dst, err := r.Write(nil, start, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if dst, err = r.Write(dst[:0], chunk, false); err != nil {
			b.Fatal(err)
		}
	}
}

func readChatMessagesCase(name, file string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", config.FamilyChatCompletions+"_to_"+config.FamilyAnthropicMessages, name, file))
}

// FuzzChatMessagesScan holds the stream events' one-pass reader to
// encoding/json's idea of valid JSON.
func FuzzChatMessagesScan(f *testing.F) {
	for _, s := range []string{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\u00e9\n"}}`,
		`{"a":[1,-2.5e+3,true,false,null,{"b":"\"\\\/\b\f\r\t"}]}`, `{"a":01}`, `{"a":"\u12"}`, `[1,]`, ` "x" `, `{"a" 1}`, "{\"a\":\"\x01\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := chatMessagesValid(b), json.Valid(b); got != want {
			t.Fatalf("valid %v, encoding/json says %v: %q", got, want, b)
		}
		m := chatMessagesMembers{b: b}
		n := 0
		for m.next() {
			n++
		}
		var obj map[string]json.RawMessage
		isObj := json.Unmarshal(b, &obj) == nil && bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
		if m.ok() != isObj {
			t.Fatalf("members ok %v, encoding/json reads an object: %v: %q", m.ok(), isObj, b)
		}
	})
}

// TestChatMessagesStreamShapes: a stream without event lines, with CRLF
// line ends and comments, translates as the recorded one does.
func TestChatMessagesStreamShapes(t *testing.T) {
	in, err := readChatMessagesCase("stream_tool_use", "response.in.sse")
	if err != nil {
		t.Fatal(err)
	}
	want, err := readChatMessagesCase("stream_tool_use", "response.out.sse")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(": a comment\r\n\r\n")
	for _, line := range strings.Split(string(in), "\n") {
		if strings.HasPrefix(line, "event: ") {
			continue
		}
		b.WriteString(line + "\r\n")
	}
	o := translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, Created: 1764806400}
	for _, size := range []int{1, 5, 1 << 20} {
		got := translatetest.TranslateChunked(t, New(), o, []byte(b.String()), size)
		if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
			t.Fatalf("chunks of %d:\n%s\nwant:\n%s", size, got, want)
		}
	}
}
