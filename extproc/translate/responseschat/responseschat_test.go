package responseschat

import (
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/internal/translatetest"
)

func TestResponsesChatGolden(t *testing.T) {
	translatetest.RunGoldens(t, New())
}

// Schemas reach the backend byte for byte: no re-encoding, no HTML
// escaping, key order kept.
func TestResponsesChatRequestKeepsSchemaBytes(t *testing.T) {
	params := `{"type":"object",  "properties": {"b": {"type": "string", "description": "<b>&</b>"}, "a": {"type":"integer"}}}`
	schema := `{"type": "object", "properties": {"z": {"enum": ["\u00e9", "é"]}}}`
	body := `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":` + params + `}],` +
		`"text":{"format":{"type":"json_schema","name":"s","schema":` + schema + `}}}`
	out, err := New().Request([]byte(body), translate.RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"parameters":` + params, `"schema":` + schema} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s\nlacks %s", out, want)
		}
	}
}

func TestResponsesChatStreamShapes(t *testing.T) {
	const head = `"object":"chat.completion.chunk","created":1,"model":"m"`
	chunk := func(delta string) string {
		return `data: {"id":"chatcmpl-x",` + head + `,"choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	finish := `data: {"id":"chatcmpl-x",` + head + `,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	tests := []struct {
		name, stream string
		want         []string // in the final response's output, in order
	}{
		{"interleaved parallel calls",
			chunk(`{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{\"x\":"}}]}`) +
				chunk(`{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"g","arguments":"{\"y\":"}}]}`) +
				chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`) +
				chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"2}"}}]}`) + finish,
			[]string{`"id":"fc_x_0","call_id":"call_a","name":"f","arguments":"{\"x\":1}"`, `"id":"fc_x_1","call_id":"call_b","name":"g","arguments":"{\"y\":2}"`}},
		{"a new id under the same index opens another call",
			chunk(`{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{\"x\":"}}]}`) +
				chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`) +
				chunk(`{"tool_calls":[{"index":0,"id":"call_b","function":{"name":"g","arguments":"{\"y\":"}}]}`) +
				chunk(`{"tool_calls":[{"index":0,"id":"call_b","function":{"arguments":"2}"}}]}`) + finish,
			[]string{`"id":"fc_x_0","call_id":"call_a","name":"f","arguments":"{\"x\":1}"`, `"id":"fc_x_1","call_id":"call_b","name":"g","arguments":"{\"y\":2}"`}},
		{"text after a call opens another message",
			chunk(`{"content":"a"}`) + chunk(`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}`) + chunk(`{"content":"b"}`) + finish,
			[]string{`"id":"msg_x",`, `"call_id":"call_x_0"`, `"id":"msg_x_2",`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New().NewResponse(translate.ResponseOptions{Status: 200, Stream: true})
			out, err := r.Write(nil, []byte(tt.stream), true)
			if err != nil {
				t.Fatal(err)
			}
			evs := decodeEvents(t, out)
			last := evs[len(evs)-1].([]any)
			if last[0] != "response.completed" {
				t.Fatalf("last event %v", last[0])
			}
			final := string(out[strings.LastIndex(string(out), "data: "):])
			at := 0
			for _, w := range tt.want {
				i := strings.Index(final[at:], w)
				if i < 0 {
					t.Fatalf("final response lacks %s (in order):\n%s", w, final)
				}
				at += i
			}
		})
	}
}

func TestResponsesChatJSONErrors(t *testing.T) {
	for _, body := range []string{`{"error":{"message":"overloaded"}}`, `not json`, `{"choices":"x"}`} {
		r := New().NewResponse(translate.ResponseOptions{Status: 200})
		if out, err := r.Write(nil, []byte(body), true); err == nil {
			t.Errorf("%s: no error, wrote %s", body, out)
		}
	}
}
