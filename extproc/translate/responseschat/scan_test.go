package responseschat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

func TestResponsesChatScanDelta(t *testing.T) {
	tests := []struct {
		name, data string
		ok         bool
		want       responsesChatDeltaChunk
	}{
		{"text", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"a\"b\u00e9\n"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			true, responsesChatDeltaChunk{content: []byte(`a\"b\u00e9\n`)}},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, true, responsesChatDeltaChunk{finish: []byte("stop")}},
		{"arguments", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\":"}}]}}]}`,
			true, responsesChatDeltaChunk{args: []byte(`{\"a\":`), argsIndex: 1, hasArgs: true}},
		{"unknown delta field skipped", `{"choices":[{"index":0,"delta":{"reasoning_content":{"x":[1,2.5e3,true]},"content":"x"}}]}`, true, responsesChatDeltaChunk{content: []byte("x")}},
		{"a call's opening", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}`, false, responsesChatDeltaChunk{}},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":1}}`, false, responsesChatDeltaChunk{}},
		{"error", `{"error":{"message":"x"}}`, false, responsesChatDeltaChunk{}},
		{"second choice", `{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`, false, responsesChatDeltaChunk{}},
		{"other index", `{"choices":[{"index":1,"delta":{"content":"b"}}]}`, false, responsesChatDeltaChunk{}},
		{"control character", "{\"choices\":[{\"delta\":{\"content\":\"a\x01\"}}]}", false, responsesChatDeltaChunk{}},
		{"invalid UTF-8", "{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}", false, responsesChatDeltaChunk{}},
		{"bad escape", `{"choices":[{"delta":{"content":"\x41"}}]}`, false, responsesChatDeltaChunk{}},
		{"trailing bytes", `{"choices":[{"delta":{"content":"a"}}]} x`, false, responsesChatDeltaChunk{}},
		{"not JSON", `[DONE`, false, responsesChatDeltaChunk{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d responsesChatDeltaChunk
			ok := responsesChatScanDelta([]byte(tt.data), &d)
			if ok != tt.ok || ok && !reflect.DeepEqual(d, tt.want) {
				t.Fatalf("got %v %+v, want %v %+v", ok, d, tt.ok, tt.want)
			}
		})
	}
}

// decodeEvents decodes a translated stream's events for a
// comparison of their values (escapes may differ).
func decodeEvents(t testing.TB, b []byte) []any {
	var p translate.Events
	var evs []any
	if err := p.Feed(b, true, func(e translate.Event) error {
		var v any
		if err := json.Unmarshal(e.Data, &v); err != nil {
			return err
		}
		evs = append(evs, []any{string(e.Name), v})
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return evs
}

// The scanner's fast path and encoding/json translate every golden stream
// to the same events.
func TestResponsesChatScanMatchesDecode(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "responses_to_chat_completions", "*", "response.in.sse"))
	for _, p := range paths {
		in, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		o := translate.ResponseOptions{Status: 200, Stream: true, RequestID: "sg"}
		fast, ferr := newStream(o).Write(nil, in, true)
		slow := newStream(o)
		slow.noScan = true
		decoded, serr := slow.Write(nil, in, true)
		if ferr != nil || serr != nil {
			t.Fatalf("%s: %v %v", p, ferr, serr)
		}
		if !reflect.DeepEqual(decodeEvents(t, fast), decodeEvents(t, decoded)) {
			t.Errorf("%s: the fast path translates differently:\n%s\nencoding/json:\n%s", p, fast, decoded)
		}
	}
}
