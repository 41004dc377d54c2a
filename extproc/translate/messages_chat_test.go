package translate

import (
	"errors"
	"testing"

	"github.com/swarmgate/swarmgate/config"
)

func TestMessagesChatGolden(t *testing.T) {
	runGoldens(t, mustPair(t, config.FamilyAnthropicMessages, config.FamilyChatCompletions))
}

func TestMessagesChatRequestEdges(t *testing.T) {
	tr := mustPair(t, config.FamilyAnthropicMessages, config.FamilyChatCompletions)
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
		{"an unknown role", `{"model":"c","messages":[{"role":"system","content":"x"}]}`, "refused messages[0].role"},
		{"a system block that is not text", `{"model":"c","system":[{"type":"image"}],"messages":[` + user + `]}`, "refused system[0].type"},
		{"mcp_servers", `{"model":"c","mcp_servers":[{"type":"url","url":"https://x","name":"x"}],"messages":[` + user + `]}`, "refused mcp_servers"},
		{"container", `{"model":"c","container":"cntr_1","messages":[` + user + `]}`, "refused container"},
		{"structured output", `{"model":"c","output_config":{"format":{"type":"json_schema","schema":{}}},"messages":[` + user + `]}`, "refused output_config.format"},
		{"an unknown tool_choice", `{"model":"c","tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"maybe"},"messages":[` + user + `]}`, "refused tool_choice.type"},
		{"a bash tool", `{"model":"c","tools":[{"type":"bash_20250124","name":"bash"}],"messages":[` + user + `]}`, "refused tools[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.Request([]byte(tt.body), RequestOptions{Model: "m"})
			var un *Unsupported
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
	for _, bad := range []string{``, `[]`, `{"messages":{}}`, `{"messages":[{"role":"user","content":5}]}`} {
		_, err := tr.Request([]byte(bad), RequestOptions{Model: "m"})
		var un *Unsupported
		if err == nil || errors.As(err, &un) {
			t.Errorf("%q: got %v, want a read error", bad, err)
		}
	}
}
