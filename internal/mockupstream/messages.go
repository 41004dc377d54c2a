package mockupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
)

// Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens), in the shapes of its API reference: a
// "message" of one text block, stop_reason end_turn or max_tokens, usage
// input_tokens (the uncached rest of the prompt), cache_read_input_tokens,
// cache_creation_input_tokens and output_tokens. A stream names every
// event: message_start (the message with usage, output_tokens 1),
// content_block_start, ping, content_block_delta per chunk,
// content_block_stop, message_delta (stop_reason and the cumulative
// output_tokens), message_stop. Errors are {"type":"error","error":{...}}
// with Anthropic's types; a 529 is overloaded_error.

func anthropicEndpoint(endpoint string) bool {
	return endpoint == "messages" || endpoint == "count_tokens"
}

// checkFamily refuses what the family's provider refuses before any work:
// Anthropic requires the anthropic-version header and max_tokens; OpenAI
// knows only the response ids it created for the key (organisation). It
// returns the error code and message, "" when the request is fine.
func (s *Server) checkFamily(rec *Record, h http.Header, q *apiRequest) (string, string) {
	switch rec.Endpoint {
	case "messages", "count_tokens":
		if h.Get("Anthropic-Version") == "" {
			return "invalid_value", "anthropic-version: header is required"
		}
		if rec.Endpoint == "messages" && q.MaxTokens <= 0 {
			return "invalid_value", "max_tokens: Field required"
		}
	case "responses":
		if q.PreviousResponseID == "" {
			return "", ""
		}
		s.mu.Lock()
		owner, ok := s.created[q.PreviousResponseID]
		s.mu.Unlock()
		if !ok || owner != rec.KeyID {
			return "previous_response_not_found", "Previous response with id '" + q.PreviousResponseID + "' not found."
		}
	}
	return "", ""
}

// anthropicErrorType is Anthropic's error type for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	e := anthropic.ErrorBody{Type: "error", Error: anthropic.ErrorDetail{Type: anthropicErrorType(status), Message: msg}}
	if status == 529 {
		e.Error.Message = "Overloaded"
	}
	body, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// setAnthropicLimits writes anthropic-ratelimit-* for the limits set
// (caller holds s.mu).
func setAnthropicLimits(h http.Header, b Behavior, win *window, now time.Time) {
	reset := now.Add(win.resetIn(now)).UTC().Format(time.RFC3339)
	if b.RPM > 0 {
		h.Set("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(b.RPM))
		h.Set("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(max(0, b.RPM-win.requests)))
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset)
	}
	if b.TPM > 0 {
		h.Set("Anthropic-Ratelimit-Tokens-Limit", strconv.Itoa(b.TPM))
		h.Set("Anthropic-Ratelimit-Tokens-Remaining", strconv.Itoa(max(0, b.TPM-win.tokens)))
		h.Set("Anthropic-Ratelimit-Tokens-Reset", reset)
	}
}

func (u usage) anthropic(output int) anthropic.Usage {
	return anthropic.Usage{InputTokens: int64(u.prompt - u.cached - u.cacheWrite), CacheCreationInputTokens: int64(u.cacheWrite),
		CacheReadInputTokens: int64(u.cached), OutputTokens: int64(output)}
}

func (s *Server) answerMessages(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, id uint64, resetAfter int) {
	w.Header().Set("Request-Id", fmt.Sprintf("req_mock_%d", id))
	stop := "end_turn"
	if u.finish == "length" {
		stop = "max_tokens"
	}
	msg := anthropic.Message{ID: fmt.Sprintf("msg_mock_%x_%d", s.instance, id), Type: "message", Role: "assistant", Model: q.Model,
		Content: []any{anthropic.TextBlock{Type: "text", Text: tokenText(0, u.completion)}}, StopReason: &stop, Usage: u.anthropic(u.completion)}
	if !q.Stream {
		chunks := (u.completion + s.opts.TokensPerChunk - 1) / s.opts.TokensPerChunk
		if !sleep(r.Context(), s.opts.TTFT+s.opts.InterTokenDelay*time.Duration(max(0, chunks-1))) {
			s.update(func() { rec.Outcome = "canceled" })
			return
		}
		s.writeJSON(w, rec, msg, resetAfter >= 0)
		return
	}
	start := msg
	start.Content, start.StopReason, start.Usage = []any{}, nil, u.anthropic(1)
	type m = map[string]any
	events := []sseEvent{
		{"message_start", m{"type": "message_start", "message": start}},
		{"content_block_start", m{"type": "content_block_start", "index": 0, "content_block": anthropic.TextBlock{Type: "text"}}},
		{"ping", m{"type": "ping"}},
	}
	for from, k := 0, s.opts.TokensPerChunk; from < u.completion; from += k {
		events = append(events, sseEvent{"content_block_delta", m{"type": "content_block_delta", "index": 0,
			"delta": m{"type": "text_delta", "text": tokenText(from, min(from+k, u.completion))}}})
	}
	events = append(events,
		sseEvent{"content_block_stop", m{"type": "content_block_stop", "index": 0}},
		sseEvent{"message_delta", m{"type": "message_delta", "delta": m{"stop_reason": stop, "stop_sequence": nil},
			"usage": m{"output_tokens": u.completion}}},
		sseEvent{"message_stop", m{"type": "message_stop"}},
	)
	s.writeEvents(w, r, rec, events, resetAfter, "")
}
