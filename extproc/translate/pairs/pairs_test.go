package pairs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
)

// TestEveryRouteHasATranslator: routing (config.Backend.Route, the xDS
// family clusters) and the data path agree on which pairs exist.
func TestEveryRouteHasATranslator(t *testing.T) {
	n := 0
	for _, from := range config.FamilyNames {
		for _, to := range config.TranslationTargets(from) {
			n++
			tr := Lookup(from, to)
			if tr == nil {
				t.Errorf("config routes %s to %s, but no translator is registered", from, to)
				continue
			}
			if tr.Request == nil || tr.NewResponse == nil || tr.Path == "" {
				t.Errorf("%s → %s: incomplete translator %+v", from, to, tr)
			}
		}
	}
	if n != len(All()) {
		t.Errorf("%d translators registered, config routes %d pairs", len(All()), n)
	}
}

// TestOnePerPair: no two translators claim the same pair (Lookup would
// hide the second).
func TestOnePerPair(t *testing.T) {
	seen := map[[2]string]bool{}
	for _, tr := range All() {
		k := [2]string{tr.From, tr.To}
		if seen[k] {
			t.Errorf("two translators for %s → %s", tr.From, tr.To)
		}
		seen[k] = true
	}
}

// TestChatMaxTokensField: translators into chat completions put the output
// cap in the field the backend asks for (reasoning models refuse
// max_tokens).
func TestChatMaxTokensField(t *testing.T) {
	tests := []struct {
		from, body string
	}{
		{config.FamilyAnthropicMessages, `{"model":"m","max_tokens":77,"messages":[{"role":"user","content":"hi"}]}`},
		{config.FamilyResponses, `{"model":"m","max_output_tokens":77,"input":"hi"}`},
	}
	for _, tt := range tests {
		for _, field := range []string{"", "max_tokens", "max_completion_tokens"} {
			out, err := Lookup(tt.from, config.FamilyChatCompletions).Request([]byte(tt.body), translate.RequestOptions{Model: "up", MaxTokensField: field})
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatal(err)
			}
			want, other := "max_tokens", "max_completion_tokens"
			if field == "max_completion_tokens" {
				want, other = other, want
			}
			if v[want] != float64(77) || v[other] != nil {
				t.Errorf("%s with %q: %s", tt.from, field, out)
			}
		}
	}
}

// TestStreamDoneAtTheClientsLastEvent: every translated stream reports
// Done exactly once the client has its family's last event, which a chat
// backend's usage chunk triggers before the backend's own [DONE]; an
// error or a cut ends the client's stream without it (but response.failed
// is the Responses API's last event). The data path reads Done to tell a
// client that closed after the last event from one that left early.
func TestStreamDoneAtTheClientsLastEvent(t *testing.T) {
	const (
		chatContent = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}` + "\n\n"
		chatFinish  = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
		chatUsage   = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}` + "\n\n"
		chatDone    = "data: [DONE]\n\n"
		chatError   = `data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n"

		msgStart = `event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":9,"output_tokens":1}}}` + "\n\n"
		msgBlock = `event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n"
		msgDelta = `event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}` + "\n\n"
		msgStop  = `event: message_stop` + "\n" + `data: {"type":"message_stop"}` + "\n\n"
		msgError = `event: error` + "\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"
	)
	// The last event of each client family's stream.
	last := map[string][]string{
		config.FamilyAnthropicMessages: {"event: message_stop"},
		config.FamilyChatCompletions:   {"data: [DONE]"},
		config.FamilyResponses:         {"event: response.completed", "event: response.incomplete", "event: response.failed"},
	}
	tests := []struct {
		name     string
		from, to string
		chunks   []string
		end      bool // the last chunk is the body's end
		doneAt   int  // the chunk after which Done turns true, -1 never
	}{
		{"Messages on chat: message_stop at the usage chunk", config.FamilyAnthropicMessages, config.FamilyChatCompletions,
			[]string{chatContent, chatFinish, chatUsage, chatDone}, true, 2},
		{"Messages on chat: no usage, message_stop at [DONE]", config.FamilyAnthropicMessages, config.FamilyChatCompletions,
			[]string{chatContent, chatFinish, chatDone}, true, 2},
		{"Messages on chat: cut", config.FamilyAnthropicMessages, config.FamilyChatCompletions,
			[]string{chatContent, chatContent}, false, -1},
		{"Messages on chat: the backend's end without a finish is an error", config.FamilyAnthropicMessages, config.FamilyChatCompletions,
			[]string{chatContent, ""}, true, -1},
		{"Messages on chat: error chunk", config.FamilyAnthropicMessages, config.FamilyChatCompletions,
			[]string{chatContent, chatError, chatDone}, true, -1},
		{"Responses on chat: response.completed at the usage chunk", config.FamilyResponses, config.FamilyChatCompletions,
			[]string{chatContent, chatFinish, chatUsage, chatDone}, true, 2},
		{"Responses on chat: no usage, completed at [DONE]", config.FamilyResponses, config.FamilyChatCompletions,
			[]string{chatContent, chatFinish, chatDone}, true, 2},
		{"Responses on chat: cut", config.FamilyResponses, config.FamilyChatCompletions,
			[]string{chatContent, chatContent}, false, -1},
		{"Responses on chat: [DONE] without a finish is response.failed", config.FamilyResponses, config.FamilyChatCompletions,
			[]string{chatContent, chatDone}, false, 1},
		{"Responses on chat: error chunk is response.failed", config.FamilyResponses, config.FamilyChatCompletions,
			[]string{chatContent, chatError}, false, 1},
		{"chat on Messages: [DONE] at message_stop", config.FamilyChatCompletions, config.FamilyAnthropicMessages,
			[]string{msgStart, msgBlock, msgDelta, msgStop, ""}, true, 3},
		{"chat on Messages: cut after message_delta", config.FamilyChatCompletions, config.FamilyAnthropicMessages,
			[]string{msgStart, msgBlock, msgDelta}, false, -1},
		{"chat on Messages: error event", config.FamilyChatCompletions, config.FamilyAnthropicMessages,
			[]string{msgStart, msgBlock, msgError, ""}, true, -1},
	}
	covered := map[[2]string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := Lookup(tt.from, tt.to)
			if tr == nil {
				t.Fatalf("no translator %s → %s", tt.from, tt.to)
			}
			covered[[2]string{tt.from, tt.to}] = true
			r := tr.NewResponse(translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, RequestID: "sg-1", Created: 1})
			var out []byte
			for i, c := range tt.chunks {
				var err error
				if out, err = r.Write(out, []byte(c), tt.end && i == len(tt.chunks)-1); err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				sent := false
				for _, m := range last[tt.from] {
					sent = sent || strings.Contains(string(out), m)
				}
				if want := tt.doneAt >= 0 && i >= tt.doneAt; r.Done() != want || sent != want {
					t.Fatalf("after chunk %d: Done %v, last event sent %v; want %v\n%s", i, r.Done(), sent, want, out)
				}
			}
		})
	}
	for _, tr := range All() {
		if !covered[[2]string{tr.From, tr.To}] {
			t.Errorf("%s → %s: no stream case", tr.From, tr.To)
		}
	}
	// A JSON or error answer ends with its body: never a stream's end.
	for _, tr := range All() {
		for _, status := range []int{200, 500} {
			r := tr.NewResponse(translate.ResponseOptions{Status: status})
			_, _ = r.Write(nil, []byte(`{}`), true)
			if r.Done() {
				t.Errorf("%s → %s: a JSON answer (status %d) reports Done", tr.From, tr.To, status)
			}
		}
	}
}
