package chatreq

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

func TestScan(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Request
	}{
		{
			name: "chat minimal",
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`,
			want: Request{Model: "gpt-4o", Messages: 1, PromptBytes: 5},
		},
		{
			name: "chat full",
			body: `{
  "model": "gpt-4o-mini",
  "stream": true,
  "stream_options": {"include_usage": true},
  "max_tokens": 100,
  "user": "u-1",
  "tools": [{"type":"function","function":{"name":"f","parameters":{}}}],
  "messages": [
    {"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"héllo"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{\"a\":1}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"42"}
  ]
}`,
			want: Request{Model: "gpt-4o-mini", Stream: true, IncludeUsage: true, HasTools: true, MaxTokens: 100, HasMaxTokens: true,
				Messages: 4, PromptBytes: 8 + 6 + 3 + 7 + 2, PromptNonASCIIBytes: 2, PromptSymbolBytes: 6 + 2,
				ToolsBytes: len(`[{"type":"function","function":{"name":"f","parameters":{}}}]`), User: "u-1"},
		},
		{
			name: "max_completion_tokens wins",
			body: `{"model":"o3","max_tokens":10,"max_completion_tokens":2000,"messages":[]}`,
			want: Request{Model: "o3", MaxTokens: 2000, HasMaxTokens: true},
		},
		{
			name: "empty tools",
			body: `{"model":"m","tools":[],"functions":null}`,
			want: Request{Model: "m", ToolsBytes: 2},
		},
		{
			name: "legacy functions",
			body: `{"model":"m","functions":[{"name":"f"}]}`,
			want: Request{Model: "m", HasTools: true, ToolsBytes: len(`[{"name":"f"}]`)},
		},
		{
			name: "completions prompt string",
			body: `{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","stream":false}`,
			want: Request{Model: "gpt-3.5-turbo-instruct", PromptBytes: 18},
		},
		{
			name: "completions token ids",
			body: `{"model":"m","prompt":[[1,2,3],[4,5]]}`,
			want: Request{Model: "m", PromptTokenIDs: 5},
		},
		{
			name: "embeddings input array",
			body: `{"model":"text-embedding-3-small","input":["ab","cde"],"encoding_format":"float"}`,
			want: Request{Model: "text-embedding-3-small", PromptBytes: 5},
		},
		{
			name: "responses input items",
			body: `{"model":"gpt-5","instructions":"be nice","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
			want: Request{Model: "gpt-5", Messages: 1, PromptBytes: 9},
		},
		{
			name: "responses tool items and max_output_tokens",
			body: `{"model":"gpt-5","max_output_tokens":300,"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"42"}]}`,
			want: Request{Model: "gpt-5", MaxTokens: 300, HasMaxTokens: true, Messages: 2, PromptBytes: 4, PromptSymbolBytes: 4},
		},
		{
			name: "escapes decoded",
			body: `{"m\u006fdel":"a\/b\u00e9","messages":[{"role":"user","content":"a\nb\u4e2d\ud83d\ude00"}]}`,
			want: Request{Model: "a/bé", Messages: 1, PromptBytes: 3 + 3 + 4, PromptNonASCIIBytes: 7},
		},
		{
			name: "escaped member names everywhere",
			body: `{"\u006d\u006f\u0064\u0065\u006c":"m","\u006d\u0061\u0078\u005f\u0063\u006f\u006d\u0070\u006c\u0065\u0074\u0069\u006f\u006e\u005f\u0074\u006f\u006b\u0065\u006e\u0073":7,` +
				`"messages":[{"c\u006fntent":[{"t\u0065xt":"ab"}],"tool_c\u0061lls":[{"functio\u006e":{"n\u0061me":"cd","\u0061rguments":"ef"}}]}]}`,
			want: Request{Model: "m", MaxTokens: 7, HasMaxTokens: true, Messages: 1, PromptBytes: 6},
		},
		{
			name: "byte classes, escaped and raw",
			body: `{"model":"m","prompt":"Ab 1,\"\u0041\u002e\t~é"}`,
			want: Request{Model: "m", PromptBytes: 12, PromptNonASCIIBytes: 2, PromptSymbolBytes: 5},
		},
		{
			name: "stream false and null options",
			body: `{"model":"m","stream":false,"stream_options":null}`,
			want: Request{Model: "m"},
		},
		{
			name: "last duplicate wins for non-model",
			body: `{"model":"m","stream":false,"stream":true}`,
			want: Request{Model: "m", Stream: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Scan([]byte(tt.body))
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			got.at = edits{} // positions: TestWithIncludeUsage
			if got != tt.want {
				t.Errorf("Scan =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestScanErrors(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		is     error // sentinel, or nil
		syntax bool
		field  string
	}{
		{name: "empty", body: ``, syntax: true},
		{name: "array", body: `[1,2]`, is: ErrNotObject},
		{name: "string", body: `"x"`, is: ErrNotObject},
		{name: "no model", body: `{"messages":[]}`, is: ErrNoModel},
		{name: "empty model", body: `{"model":""}`, is: ErrNoModel},
		{name: "null model", body: `{"model":null}`, is: ErrNoModel},
		{name: "number model", body: `{"model":4}`, is: ErrModelType},
		{name: "duplicate model", body: `{"model":"a","model":"b"}`, is: ErrDuplicateModel},
		{name: "duplicate escaped model", body: `{"model":"a","mod\u0065l":"b"}`, is: ErrDuplicateModel},
		{name: "stream string", body: `{"model":"m","stream":"yes"}`, field: "stream"},
		{name: "negative max_tokens", body: `{"model":"m","max_tokens":-1}`, field: "max_tokens"},
		{name: "fraction max_tokens", body: `{"model":"m","max_tokens":1.5}`, field: "max_tokens"},
		{name: "huge max_tokens", body: `{"model":"m","max_tokens":99999999999999999999}`, field: "max_tokens"},
		{name: "messages object", body: `{"model":"m","messages":{}}`, field: "messages"},
		{name: "message string", body: `{"model":"m","messages":["hi"]}`, field: "messages"},
		{name: "stream_options array", body: `{"model":"m","stream_options":[]}`, field: "stream_options"},
		{name: "truncated", body: `{"model":"m","messages":[{"role":"user","content":"hi`, syntax: true},
		{name: "trailing comma", body: `{"model":"m",}`, syntax: true},
		{name: "trailing garbage", body: `{"model":"m"} x`, syntax: true},
		{name: "control char", body: "{\"model\":\"m\x01\"}", syntax: true},
		{name: "bad escape", body: `{"model":"\x"}`, syntax: true},
		{name: "bad number", body: `{"model":"m","n":01}`, syntax: true},
		{name: "bad literal", body: `{"model":"m","stream":tru}`, syntax: true},
		{name: "syntax beats semantics", body: `{"model":1,"x":[}`, syntax: true},
		{name: "deep", body: `{"model":"m","x":` + strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1) + `}`, syntax: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Scan([]byte(tt.body))
			if err == nil {
				t.Fatal("Scan succeeded")
			}
			var se *SyntaxError
			var fe *FieldError
			switch {
			case tt.syntax:
				if !errors.As(err, &se) {
					t.Fatalf("err = %v, want *SyntaxError", err)
				}
				if json.Valid([]byte(tt.body)) {
					t.Fatalf("encoding/json accepts %q", tt.body)
				}
			case tt.field != "":
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("err = %v, want FieldError for %s", err, tt.field)
				}
			default:
				if !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
			}
		})
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	body := "{\n  \"model\": \"m\",\n  \"x\": [1, 2,]\n}"
	_, err := Scan([]byte(body))
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v", err)
	}
	if se.Line != 3 || se.Col != 14 || body[se.Offset] != ']' {
		t.Errorf("position = line %d col %d offset %d (%q), want line 3 col 14 at ']'", se.Line, se.Col, se.Offset, body[se.Offset])
	}
	if msg := se.Error(); !strings.Contains(msg, "line 3, column 14") {
		t.Errorf("Error() = %q does not name the position", msg)
	}
}
