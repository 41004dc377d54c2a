package extproc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// translationConfig is translationYAML (chat backends relay and oai, the
// Anthropic backend ant) billing cut streams per policy.
func translationConfig(t *testing.T, policy string) *config.Config {
	t.Helper()
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Accounting.BillOnDisconnect = policy
	return cfg
}

// streamExchange drives one streamed request through the router-level
// handler: admitted on path, answered 200 by backend in chunks (the last
// with end_of_stream when end), then the stream ends as serveRouter ends
// it (a client disconnect unless end_of_stream came). It returns the
// ledger entry and the tokens the reservation was settled at.
func streamExchange(t *testing.T, h *harness, path, body, backend string, chunks []string, end bool) (extproc.Entry, int64) {
	t.Helper()
	ctx := context.Background()
	x := h.srv.NewRouterExchange()
	x.Handle(ctx, reqHeaders(false, ":method", "POST", ":path", path, ":authority", "gw", "authorization", "Bearer "+keyAlpha,
		"anthropic-version", "2023-06-01", "content-type", "application/json"))
	if r := x.Handle(ctx, reqBody(body)); r.GetRequestBody() == nil {
		t.Fatalf("not admitted: %v", r)
	}
	x.Handle(ctx, respHeaders(false, ":status", "200", "content-type", "text/event-stream",
		contract.HeaderBackend, backend, contract.HeaderUpstreamKey, backend+"-1"))
	for i, c := range chunks {
		x.Handle(ctx, respBody([]byte(c), end && i == len(chunks)-1))
	}
	x.End()
	e := h.cap.waitEntry(t)
	h.cap.mu.Lock()
	defer h.cap.mu.Unlock()
	return e, h.cap.settled["res-"+e.RequestID]
}

// Anthropic stream events: message_start reports the prompt and an output
// of 1; the answer's output comes only in message_delta.
const (
	antStart = "event: message_start\ndata: " +
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n"
	antText = "event: content_block_delta\ndata: " +
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + antWords + `"}}` + "\n\n"
	antWords = "forty bytes of an answer, word by word. " // 40 bytes: 10 tokens at 4 bytes/token
	antDelta = "event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":790}}` + "\n\n"
	antStop     = "event: message_stop\ndata: " + `{"type":"message_stop"}` + "\n\n"
	antOverload = "event: error\ndata: " + `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"
)

// TestAnthropicStreamCutBillsDelivered: message_start's output count is
// provisional. An Anthropic stream cut (client disconnect, upstream reset)
// or ended by an error event before message_delta bills the reported
// prompt and the larger of the reported and the delivered output,
// estimated; not message_start's 1 output token as the provider's report.
// The backend's bytes are read, so a chat client translated onto the
// Anthropic backend is billed the same.
func TestAnthropicStreamCutBillsDelivered(t *testing.T) {
	deltas := strings.Repeat(antText, 80) // 3,200 bytes: 800 tokens delivered
	clients := []struct{ name, path, body string }{
		{"Messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`},
		{"chat translated", "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`},
	}
	tests := []struct {
		name       string
		chunks     []string
		end        bool // end_of_stream came; else the client went away
		completion int64
		estimated  bool
	}{
		{"cut after the deltas", []string{antStart, deltas}, false, 800, true},
		{"overloaded_error before message_delta", []string{antStart, deltas, antOverload}, true, 800, true},
		{"cut after the error event", []string{antStart, deltas, antOverload}, false, 800, true},
		{"cut after message_start: the report's 1 stands", []string{antStart}, false, 1, true},
		{"cut after message_delta: reported", []string{antStart, deltas, antDelta}, false, 790, false},
		{"whole stream: reported", []string{antStart, deltas, antDelta + antStop}, true, 790, false},
	}
	for _, c := range clients {
		for _, tc := range tests {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				h := newHarness(t, translationConfig(t, "reported"))
				e, settled := streamExchange(t, h, c.path, c.body, "ant", tc.chunks, tc.end)
				if e.Usage.PromptTokens != 25 || e.Usage.CompletionTokens != tc.completion || e.Usage.TotalTokens != 25+tc.completion {
					t.Errorf("usage %+v, want 25 prompt (reported) and %d output", e.Usage, tc.completion)
				}
				if e.Estimated != tc.estimated || e.Disconnected != !tc.end {
					t.Errorf("estimated %v disconnected %v, want %v %v", e.Estimated, e.Disconnected, tc.estimated, !tc.end)
				}
				if settled != 25+tc.completion {
					t.Errorf("settled at %d tokens, want %d", settled, 25+tc.completion)
				}
			})
		}
	}
}

// TestTranslatedStreamReadToItsEnd: a translator sends the client its
// last event (message_stop, response.completed) at the chat backend's
// usage chunk, before the backend's [DONE]. An SDK closes the stream
// there; when [DONE] would come in a later chunk, the stream ends without
// it. The client had the whole answer: billed as reported, not as a
// disconnect, under every bill_on_disconnect policy. A client that leaves
// before its last event is still a disconnect.
func TestTranslatedStreamReadToItsEnd(t *testing.T) {
	const (
		chatText   = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello there"},"finish_reason":null}]}` + "\n\n"
		chatFinish = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
		chatUsage  = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}` + "\n\n"
	)
	clients := []struct {
		name, path, body, backend string
		chunks                    []string // the backend's, up to the client's last event
		reported                  int64
	}{
		{"Messages on chat", "/v1/messages", `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`,
			"oai", []string{chatText, chatFinish + chatUsage}, 11},
		{"Responses on chat", "/v1/responses", `{"model":"m","stream":true,"max_output_tokens":1000,"input":"hi"}`,
			"oai", []string{chatText, chatFinish + chatUsage}, 11},
		{"chat on Messages", "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`,
			"ant", []string{antStart, antText, antDelta + antStop}, 25 + 790},
	}
	for _, c := range clients {
		for _, policy := range []string{"reported", "delivered", "reserved"} {
			t.Run(c.name+"/"+policy, func(t *testing.T) {
				h := newHarness(t, translationConfig(t, policy))
				e, settled := streamExchange(t, h, c.path, c.body, c.backend, c.chunks, false)
				if e.Disconnected || e.Estimated || e.Usage.TotalTokens != c.reported || settled != c.reported {
					t.Fatalf("entry %+v settled %d, want the reported %d and no disconnect", e, settled, c.reported)
				}
				// Left before the last event: a disconnect, billed per policy.
				e, _ = streamExchange(t, h, c.path, c.body, c.backend, c.chunks[:1], false)
				if !e.Disconnected || !e.Estimated {
					t.Fatalf("cut before the last event: entry %+v, want a disconnect", e)
				}
			})
		}
	}
}
