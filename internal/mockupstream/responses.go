package mockupstream

import (
	"fmt"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// OpenAI's Responses API (POST /v1/responses), in the shapes of its API
// reference: a "response" object whose output is one assistant message of
// one output_text part, usage as input_tokens (with
// input_tokens_details.cached_tokens) and output_tokens (with
// output_tokens_details.reasoning_tokens). A stream names every event and
// ends with response.completed (response.incomplete when max_output_tokens
// cut it), without "data: [DONE]".
//
// Every response id the mock creates is remembered with the key that
// created it: a request whose previous_response_id another key (or
// another mock) created is answered 404 previous_response_not_found, as a
// provider's organisation boundary does.

func (u usage) responses() *openai.ResponseUsage {
	return &openai.ResponseUsage{InputTokens: int64(u.prompt), OutputTokens: int64(u.completion), TotalTokens: int64(u.prompt + u.completion),
		InputTokensDetails:  openai.InputTokensDetails{CachedTokens: int64(u.cached)},
		OutputTokensDetails: openai.OutputTokensDetails{ReasoningTokens: int64(u.reasoning)}}
}

// responseID is unique across mocks (the address) and keeps the sequence.
func (s *Server) responseID(id uint64) string {
	return fmt.Sprintf("resp_mock_%x_%d", s.instance, id)
}

func (s *Server) answerResponses(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, id uint64, created int64, resetAfter int) {
	rid := s.responseID(id)
	s.update(func() {
		rec.ResponseID = rid
		if len(s.created) >= s.opts.MaxRecords { // bounded like the records
			clear(s.created)
		}
		s.created[rid] = rec.KeyID
	})
	text := tokenText(0, u.completion-u.reasoning)
	obj := func(status string, out []any, usage *openai.ResponseUsage) openai.Response {
		o := openai.Response{ID: rid, AccessPrograms: openai.AccessPrograms{Cyber: "standard"}, Object: "response", CreatedAt: created, Status: status, Model: q.Model,
			Output: out, ParallelToolCalls: true, Tools: []struct{}{}, ToolChoice: "auto", Usage: usage}
		if q.PreviousResponseID != "" {
			o.PreviousResponseID = &q.PreviousResponseID
		}
		if status == "incomplete" {
			o.IncompleteDetails = &openai.IncompleteDetails{Reason: "max_output_tokens"}
		}
		return o
	}
	final := "completed"
	if u.finish == "length" {
		final = "incomplete"
	}
	msgID := fmt.Sprintf("msg_mock_%d", id)
	done := openai.OutputMessage{Type: "message", ID: msgID, Status: final, Role: "assistant",
		Content: []openai.OutputText{{Type: "output_text", Text: text, Annotations: []struct{}{}}}}
	if !q.Stream {
		chunks := (u.completion - u.reasoning + s.opts.TokensPerChunk - 1) / s.opts.TokensPerChunk
		if !sleep(r.Context(), s.opts.TTFT+s.opts.InterTokenDelay*time.Duration(max(0, chunks-1))) {
			s.update(func() { rec.Outcome = "canceled" })
			return
		}
		s.writeJSON(w, rec, obj(final, []any{done}, u.responses()), resetAfter >= 0)
		return
	}

	seq := 0
	ev := func(name string, fields map[string]any) sseEvent {
		fields["type"], fields["sequence_number"] = name, seq
		seq++
		return sseEvent{name: name, data: fields}
	}
	loc := func(m map[string]any) map[string]any {
		m["item_id"], m["output_index"], m["content_index"] = msgID, 0, 0
		return m
	}
	events := []sseEvent{
		ev("response.created", map[string]any{"response": obj("in_progress", []any{}, nil)}),
		ev("response.in_progress", map[string]any{"response": obj("in_progress", []any{}, nil)}),
		ev("response.output_item.added", map[string]any{"output_index": 0,
			"item": openai.OutputMessage{Type: "message", ID: msgID, Status: "in_progress", Role: "assistant", Content: []openai.OutputText{}}}),
		ev("response.content_part.added", loc(map[string]any{"part": openai.OutputText{Type: "output_text", Annotations: []struct{}{}}})),
	}
	visible, k := u.completion-u.reasoning, s.opts.TokensPerChunk
	for from := 0; from < visible; from += k {
		events = append(events, ev("response.output_text.delta", loc(map[string]any{"delta": tokenText(from, min(from+k, visible)), "logprobs": []struct{}{}})))
	}
	events = append(events,
		ev("response.output_text.done", loc(map[string]any{"text": text, "logprobs": []struct{}{}})),
		ev("response.content_part.done", loc(map[string]any{"part": done.Content[0]})),
		ev("response.output_item.done", map[string]any{"output_index": 0, "item": done}),
		ev("response."+final, map[string]any{"response": obj(final, []any{done}, u.responses())}),
	)
	s.writeEvents(w, r, rec, events, resetAfter, "")
}
