// Package responseschat translates a Responses API client's requests for a
// chat completions backend, for requests that keep no state on the server
// (docs/translation-responses-chat.md):
//
//   - request.go: the Responses request body → a chat completions request
//     body, refusing server-side state and built-in tools with an
//     *translate.Unsupported naming the field.
//   - response.go: a chat completion (JSON) → a Response object, and the
//     Response object writer the stream shares.
//   - stream.go: chat completion chunks (SSE) → the Responses event
//     sequence.
package responseschat

import (
	"strconv"
	"strings"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
)

// New is the Responses API client → chat completions backend pair.
func New() *translate.Translator {
	return &translate.Translator{
		From:        config.FamilyResponses,
		To:          config.FamilyChatCompletions,
		Path:        "/v1/chat/completions",
		Request:     translateRequest,
		NewResponse: newResponse,
	}
}

// appendInt appends n in decimal.
func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// idBase is the part of a chat completion id the Responses
// ids are derived from: the id without OpenAI's "chatcmpl-" prefix, or,
// when the backend sent none, the gateway's request id. The same chat
// answer always gets the same ids.
func idBase(chatID, requestID string) string {
	if b := strings.TrimPrefix(chatID, "chatcmpl-"); b != "" {
		return b
	}
	if requestID != "" {
		return requestID
	}
	return "swarmgate"
}
