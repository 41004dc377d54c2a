package mockupstream

import (
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

var agentScript = map[string]string{"exec_command": `{"cmd":"echo ok > proof.txt"}`, "tools.close_agent": `{"target":"a1"}`}

// TestToolScriptResponses: the Responses API answers a request declaring a
// scripted tool with one call of it (a namespace's function carries its
// namespace), through the official SDK, JSON and stream; the request that
// carries the call's output is answered with text.
func TestToolScriptResponses(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 5, ToolScript: agentScript})
	c := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	fn := func(name string) responses.ToolUnionParam {
		return responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: name, Parameters: map[string]any{"type": "object"}}}
	}
	tools := map[string][]responses.ToolUnionParam{
		"exec_command": {fn("read_file"), fn("exec_command")},
		"close_agent": {fn("read_file"), {OfNamespace: &responses.NamespaceToolParam{Name: "tools", Description: "agents",
			Tools: []responses.NamespaceToolToolUnionParam{{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "close_agent"}}}}}},
	}
	for name, ts := range tools {
		for _, stream := range []bool{false, true} {
			params := responses.ResponseNewParams{Model: "gpt-4o-mini", Tools: ts,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("do it")}}
			var resp *responses.Response
			if stream {
				st := c.Responses.NewStreaming(testCtx(t), params)
				for st.Next() {
					if ev := st.Current(); ev.Type == "response.completed" {
						r := ev.Response
						resp = &r
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				var err error
				if resp, err = c.Responses.New(testCtx(t), params); err != nil {
					t.Fatal(err)
				}
			}
			if resp == nil || len(resp.Output) != 1 || resp.Output[0].Type != "function_call" {
				t.Fatalf("%s stream=%v: output %+v", name, stream, resp)
			}
			call := resp.Output[0].AsFunctionCall()
			wantNS, wantArgs := "", agentScript["exec_command"]
			if name == "close_agent" {
				wantNS, wantArgs = "tools", agentScript["tools.close_agent"]
			}
			if call.Name != name || call.Namespace != wantNS || call.Arguments != wantArgs || call.CallID == "" {
				t.Errorf("%s stream=%v: call %+v", name, stream, call)
			}

			// The call's output comes back: text.
			out := responses.ResponseInputItemParamOfFunctionCallOutput("done")
			out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
			params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name), out,
			}}
			final, err := c.Responses.New(testCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			if final.OutputText() == "" || final.Output[0].Type != "message" {
				t.Errorf("after the tool output: %+v", final.Output)
			}
		}
	}
	recs := s.Requests()
	if last := recs[len(recs)-1]; last.ToolResults != 1 || last.ToolCalls != 0 {
		t.Errorf("last record %+v", last)
	}
}

// TestToolScriptChatAndMessages: chat completions and Anthropic Messages
// call the scripted tool once (not the first declared tool), JSON and
// stream, and answer the tool result with text.
func TestToolScriptChatAndMessages(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 5, ToolScript: agentScript})
	for _, stream := range []bool{false, true} {
		chat := map[string]any{"model": "m", "stream": stream, "messages": []map[string]any{{"role": "user", "content": "go"}},
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "read_file"}},
				{"type": "function", "function": map[string]any{"name": "exec_command"}}}}
		_, body, err := post(t, s, "/v1/chat/completions", keyA, chat, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"name":"exec_command"`) || strings.Contains(string(body), "read_file") ||
			!strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
			t.Errorf("chat stream=%v: %s", stream, body)
		}
		if !stream && !strings.Contains(string(body), `"arguments":`+jsonString(agentScript["exec_command"])) {
			t.Errorf("chat arguments: %s", body)
		}
		msgs := map[string]any{"model": "m", "max_tokens": 50, "stream": stream,
			"messages": []map[string]any{{"role": "user", "content": "go"}, {"role": "system", "content": "env"}},
			"tools":    []map[string]any{{"name": "Read"}, {"name": "exec_command"}}}
		_, body, err = post(t, s, "/v1/messages", keyA, msgs, map[string]string{"anthropic-version": "2023-06-01"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"name":"exec_command"`) || strings.Count(string(body), `"tool_use"`) < 1 {
			t.Errorf("messages stream=%v: %s", stream, body)
		}
		msgs["messages"] = append(msgs["messages"].([]map[string]any),
			map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "t1", "name": "exec_command", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}}})
		_, body, err = post(t, s, "/v1/messages", keyA, msgs, map[string]string{"anthropic-version": "2023-06-01"})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), `"tool_use"`) || !strings.Contains(string(body), "end_turn") {
			t.Errorf("messages after the result, stream=%v: %s", stream, body)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestToolScriptFlag(t *testing.T) {
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--tool-script", `Bash={"command":"ls"}`, "--tool-script", `ns.f={}`}); err != nil {
		t.Fatal(err)
	}
	_, o, err := f.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.ToolScript) != 2 || o.ToolScript["Bash"] != `{"command":"ls"}` || o.ToolScript["ns.f"] != "{}" {
		t.Errorf("ToolScript %v", o.ToolScript)
	}
	for _, bad := range []string{"Bash", `={}`, `Bash=[1]`, `Bash={`} {
		fs := flag.NewFlagSet("m", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		RegisterFlags(fs)
		if err := fs.Parse([]string{"--tool-script", bad}); err == nil {
			t.Errorf("--tool-script %q accepted", bad)
		}
	}
}
