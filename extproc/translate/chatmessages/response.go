package chatmessages

// Chat completions client → Anthropic Messages backend: the response half.
// A JSON answer is held to its end and rewritten whole; a stream is
// rewritten event by event into chat.completion.chunk lines, copying the
// backend's JSON string literals (text, partial_json) as they are, so a
// text delta costs one validating pass over the event and one append
// (stream.go).

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
)

func newResponse(o translate.ResponseOptions) translate.Response {
	switch {
	case o.Status >= 400:
		return translate.NewErrorResponse(o.Status, family.OpenAI)
	case o.Stream:
		s := &sseResponse{o: o}
		s.onEvent = s.event
		return s
	}
	return &jsonResponse{o: o}
}

// tokenCounts is the usage as counted so far.
type tokenCounts struct {
	input, output, cacheCreation, cacheRead int64
}

// appendJSON writes the chat completions usage object: Anthropic counts
// cached input apart from input_tokens, OpenAI's prompt_tokens include it.
func (t *tokenCounts) appendJSON(b []byte) []byte {
	prompt := t.input + t.cacheRead + t.cacheCreation
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, prompt, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, t.output, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, prompt+t.output, 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, t.cacheRead, 10)
	return append(b, "}}"...)
}

// finishReason maps Anthropic's stop_reason to a finish_reason.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn, and none given
}

// jsonResponse holds a JSON answer to its end.
type jsonResponse struct {
	o   translate.ResponseOptions
	buf []byte
}

// messageAnswer is the part of a message object the translation
// reads.
type messageAnswer struct {
	ID         string                   `json:"id"`
	Model      string                   `json:"model"`
	StopReason string                   `json:"stop_reason"`
	Content    []anthropic.ContentBlock `json:"content"`
	Usage      anthropic.Usage          `json:"usage"`
}

// errTooLarge: a JSON answer above translate.MaxBuffered.
var errTooLarge = errors.New("translate: the backend's answer exceeds the translation buffer")

func (*jsonResponse) Done() bool { return false }

func (r *jsonResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if len(r.buf)+len(chunk) > translate.MaxBuffered {
		return dst, errTooLarge
	}
	r.buf = append(r.buf, chunk...)
	if !end {
		return dst, nil
	}
	var a messageAnswer
	if err := json.Unmarshal(r.buf, &a); err != nil {
		return dst, &readError{err: err}
	}
	u := a.Usage
	tokens := tokenCounts{input: u.InputTokens, output: u.OutputTokens, cacheCreation: u.CacheCreationInputTokens, cacheRead: u.CacheReadInputTokens}

	b := dst
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, "chatcmpl-"+a.ID)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, r.o.Created, 10)
	b = append(b, `,"model":`...)
	b = jsonstr.Append(b, a.Model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	var text []byte
	hasText := false
	for _, c := range a.Content {
		if c.Type == "text" {
			text = append(text, c.Text...)
			hasText = true
		}
	}
	if hasText {
		b = jsonstr.Append(b, string(text))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"refusal":null`...)
	calls := 0
	for _, c := range a.Content {
		if c.Type != "tool_use" {
			continue // thinking and redacted_thinking are not the client's to see
		}
		if calls == 0 {
			b = append(b, `,"tool_calls":[`...)
		} else {
			b = append(b, ',')
		}
		calls++
		b = append(b, `{"id":`...)
		b = jsonstr.Append(b, c.ID)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = jsonstr.Append(b, c.Name)
		b = append(b, `,"arguments":`...)
		b = jsonstr.Append(b, compactInput(c.Input))
		b = append(b, "}}"...)
	}
	if calls > 0 {
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = jsonstr.Append(b, finishReason(a.StopReason))
	b = append(b, `}],"usage":`...)
	b = tokens.appendJSON(b)
	b = append(b, '}')
	r.buf = nil
	return b, nil
}

// compactInput is a tool input as the compact JSON text a client
// reads as arguments ({} when the backend sent none).
func compactInput(input json.RawMessage) string {
	if len(input) == 0 || string(input) == "null" {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, input) != nil {
		return "{}"
	}
	return buf.String()
}

// readError is a backend body that is not Anthropic's shape.
type readError struct{ err error }

func (e *readError) Error() string {
	return "translate: the backend's answer is not an Anthropic message: " + e.err.Error()
}

func (e *readError) Unwrap() error { return e.err }
