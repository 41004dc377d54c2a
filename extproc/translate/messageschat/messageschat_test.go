package messageschat

import (
	"errors"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/internal/translatetest"
)

func TestMessagesChatGolden(t *testing.T) {
	translatetest.RunGoldens(t, New())
}

func TestMessagesChatRequestEdges(t *testing.T) {
	tr := New()
	const user = `{"role":"user","content":"hi"}`
	tests := []struct {
		name, body string
		want       string // the translated body, or the refused param after "refused "
	}{
		{"tool_choice without tools is dropped",
			`{"model":"c","max_tokens":5,"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[` + user + `]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`},
		{"an assistant turn of tool calls only has null content; input order and HTML characters kept",
			`{"model":"c","max_tokens":5,"messages":[` + user + `,{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"z":"<a&b>","a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"z\":\"<a&b>\",\"a\":1}"}}]},{"role":"tool","content":"","tool_call_id":"t1"}],"max_tokens":5}`},
		{"an assistant turn of thinking only sends empty content",
			`{"model":"c","messages":[` + user + `,{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"}]},` + user + `]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""},{"role":"user","content":"hi"}]}`},
		{"null optional fields are absent",
			`{"model":"c","max_tokens":null,"top_k":null,"temperature":null,"system":null,"tool_choice":null,"metadata":{"user_id":null},"messages":[` + user + `]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"stream false sends no stream options",
			`{"model":"c","stream":false,"messages":[` + user + `]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"a file image source", `{"model":"c","messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f1"}}]}]}`,
			"refused messages[0].content[0].source.type"},
		{"an image from the assistant", `{"model":"c","messages":[` + user + `,{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"u"}}]},` + user + `]}`,
			"refused messages[1].content[0].type"},
		{"tool_use from the user", `{"model":"c","messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`,
			"refused messages[0].content[0].type"},
		{"an unknown role", `{"model":"c","messages":[{"role":"tool","content":"x"}]}`, "refused messages[0].role"},
		{"system turns inside messages stay system text, in order",
			`{"model":"c","system":"s0","messages":[` + user + `,{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral"}},{"type":"text","text":"more"}]},{"role":"system","content":"s2"},{"role":"system","content":""}]}`,
			`{"model":"m","messages":[{"role":"system","content":"s0"},{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"env"},{"type":"text","text":"more"}]},{"role":"system","content":"s2"}]}`},
		{"a system turn that is not text", `{"model":"c","messages":[` + user + `,{"role":"system","content":[{"type":"text","text":"a"},{"type":"image"}]}]}`,
			"refused messages[1].content[1].type"},
		{"a system block that is not text", `{"model":"c","system":[{"type":"image"}],"messages":[` + user + `]}`, "refused system[0].type"},
		{"mcp_servers", `{"model":"c","mcp_servers":[{"type":"url","url":"https://x","name":"x"}],"messages":[` + user + `]}`, "refused mcp_servers"},
		{"container", `{"model":"c","container":"cntr_1","messages":[` + user + `]}`, "refused container"},
		{"structured output", `{"model":"c","output_config":{"format":{"type":"json_schema","schema":{}}},"messages":[` + user + `]}`, "refused output_config.format"},
		{"an unknown tool_choice", `{"model":"c","tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"maybe"},"messages":[` + user + `]}`, "refused tool_choice.type"},
		{"a bash tool", `{"model":"c","tools":[{"type":"bash_20250124","name":"bash"}],"messages":[` + user + `]}`, "refused tools[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.Request([]byte(tt.body), translate.RequestOptions{Model: "m"})
			var un *translate.Unsupported
			switch {
			case errors.As(err, &un):
				if got := "refused " + un.Param; got != tt.want {
					t.Fatalf("got %s (%s), want %s", got, un.Message, tt.want)
				}
			case err != nil:
				t.Fatal(err)
			case string(out) != tt.want:
				t.Fatalf("got  %s\nwant %s", out, tt.want)
			}
		})
	}
	// Hosted tools dropped: the request goes without them (and without a
	// tool_choice forcing one), each reported.
	var dropped []string
	o := translate.RequestOptions{Model: "m", Hosted: translate.DropHosted, Dropped: func(tt string) { dropped = append(dropped, tt) }}
	out, err := tr.Request([]byte(`{"model":"c","tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f","input_schema":{"type":"object"}},{"type":"computer_20250124","name":"computer"}],"tool_choice":{"type":"tool","name":"web_search"},"messages":[`+
		user+`,{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"s1","content":[]},{"type":"text","text":"found"}]},`+user+`]}`), o)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"found"},{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`
	if string(out) != want {
		t.Errorf("dropped hosted tools:\ngot  %s\nwant %s", out, want)
	}
	if got := strings.Join(dropped, ","); got != "web_search_20250305,computer_20250124" {
		t.Errorf("dropped %q", got)
	}
	for _, bad := range []string{``, `[]`, `{"messages":{}}`, `{"messages":[{"role":"user","content":5}]}`} {
		_, err := tr.Request([]byte(bad), translate.RequestOptions{Model: "m"})
		var un *translate.Unsupported
		if err == nil || errors.As(err, &un) {
			t.Errorf("%q: got %v, want a read error", bad, err)
		}
	}
}
