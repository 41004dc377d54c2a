package mockupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// Scripted tool calls (Options.ToolScript), so that a real agent (Claude
// Code, Codex) run against the mock completes a task: its first request
// declares its tools and is answered with one call of a scripted tool, with
// arguments it can execute; the request carrying the tool's result is
// answered with text, and the agent finishes.
//
//   - chat completions and Anthropic Messages: as Options.ToolCalls answers
//     (tools.go), with one call instead of two;
//   - Responses API: an output of one function_call item (its namespace
//     set when the tool is a namespace's function), JSON or the event
//     sequence response.created, response.in_progress,
//     response.output_item.added, two response.function_call_arguments.delta,
//     response.function_call_arguments.done, response.output_item.done,
//     response.completed. A request whose last input item is a
//     function_call_output is answered with text.

// calledTool is the tool an answer calls: its name and, for a Responses
// namespace's function, the namespace.
type calledTool struct{ namespace, name string }

// scriptedTool is the first tool of the request that Options.ToolScript
// names, with its arguments.
func (s *Server) scriptedTool(endpoint string, q *apiRequest) (calledTool, string, bool) {
	if len(s.opts.ToolScript) == 0 {
		return calledTool{}, "", false
	}
	for _, t := range q.Tools {
		var c calledTool
		switch {
		case endpoint == "chat" && t.Function != nil:
			c.name = t.Function.Name
		case endpoint == "messages":
			c.name = t.Name
		case endpoint == "responses" && t.Type == "function":
			c.name = t.Name
		case endpoint == "responses" && t.Type == "namespace":
			for _, in := range t.Tools {
				if args, ok := s.opts.ToolScript[t.Name+"."+in.Name]; ok && in.Type == "function" {
					return calledTool{namespace: t.Name, name: in.Name}, args, true
				}
			}
		}
		if args, ok := s.opts.ToolScript[c.name]; ok && c.name != "" {
			return c, args, true
		}
	}
	return calledTool{}, "", false
}

// splitArgs cuts arguments in the two pieces they are streamed in.
func splitArgs(args string) [2]string {
	return [2]string{args[:len(args)/2], args[len(args)/2:]}
}

// inspectResponsesInput notes the function call outputs of a Responses
// request's input items, and whether the last item is one.
func inspectResponsesInput(input json.RawMessage) conversation {
	var c conversation
	var items []struct {
		Type string `json:"type"`
	}
	if len(input) == 0 || input[0] != '[' || json.Unmarshal(input, &items) != nil {
		return c
	}
	for _, it := range items {
		result := strings.HasSuffix(it.Type, "call_output") // function_call_output, custom_tool_call_output
		if result {
			c.toolResults++
		}
		c.endsWithToolResult = result
	}
	return c
}

// answerResponsesCall answers a Responses request with one function call.
func (s *Server) answerResponsesCall(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, tool calledTool, args [2]string, id uint64, created int64, resetAfter int) {
	rid := s.responseID(id)
	s.update(func() {
		rec.ResponseID, rec.ToolCalls = rid, 1
		if len(s.created) >= s.opts.MaxRecords {
			clear(s.created)
		}
		s.created[rid] = rec.KeyID
	})
	item := openai.FunctionCallItem{Type: "function_call", ID: fmt.Sprintf("fc_mock_%d", id), CallID: fmt.Sprintf("call_%d_0", id),
		Namespace: tool.namespace, Name: tool.name, Arguments: args[0] + args[1], Status: "completed"}
	obj := func(status string, out []any, usage *openai.ResponseUsage) map[string]any {
		return map[string]any{"id": rid, "access_programs": openai.AccessPrograms{Cyber: "standard"}, "object": "response", "created_at": created, "status": status, "error": nil,
			"incomplete_details": nil, "model": q.Model, "output": out, "parallel_tool_calls": true,
			"previous_response_id": nil, "tools": []struct{}{}, "tool_choice": "auto", "usage": usage}
	}
	if !q.Stream {
		if !s.jsonDelay(r, rec, 4) {
			return
		}
		s.writeJSON(w, rec, obj("completed", []any{item}, u.responses()), resetAfter >= 0)
		return
	}
	seq := 0
	ev := func(name string, fields map[string]any) sseEvent {
		fields["type"], fields["sequence_number"] = name, seq
		seq++
		return sseEvent{name: name, data: fields}
	}
	added := item
	added.Arguments, added.Status = "", "in_progress"
	events := []sseEvent{
		ev("response.created", map[string]any{"response": obj("in_progress", []any{}, nil)}),
		ev("response.in_progress", map[string]any{"response": obj("in_progress", []any{}, nil)}),
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": added}),
	}
	for _, piece := range args {
		events = append(events, ev("response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": 0, "delta": piece}))
	}
	events = append(events,
		ev("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": 0, "name": item.Name, "arguments": item.Arguments}),
		ev("response.output_item.done", map[string]any{"output_index": 0, "item": item}),
		ev("response.completed", map[string]any{"response": obj("completed", []any{item}, u.responses())}),
	)
	s.writeEvents(w, r, rec, events, resetAfter, "")
}
