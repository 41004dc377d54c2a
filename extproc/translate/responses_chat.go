package translate

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/config"
)

// The Responses API client → chat completions backend pair, for requests
// that keep no state on the server (docs/translation-responses-chat.md):
//
//   - responses_chat_request.go: the Responses request body → a chat
//     completions request body, refusing server-side state and built-in
//     tools with an *Unsupported naming the field.
//   - responses_chat_response.go: a chat completion (JSON) → a Response
//     object, and the Response object writer the stream shares.
//   - responses_chat_stream.go: chat completion chunks (SSE) → the
//     Responses event sequence.
func init() {
	register(&Translator{
		From:        config.FamilyResponses,
		To:          config.FamilyChatCompletions,
		Path:        "/v1/chat/completions",
		Request:     responsesChatRequest,
		NewResponse: newResponsesChatResponse,
	})
}

// responsesChatAppendString appends s as a JSON string: quotes,
// backslashes and control characters escaped, other UTF-8 kept, invalid
// UTF-8 replaced by U+FFFD (encoding/json's rule) so the output is always
// valid JSON.
func responsesChatAppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// responsesChatAppendInt appends n in decimal.
func responsesChatAppendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// responsesChatIDBase is the part of a chat completion id the Responses
// ids are derived from: the id without OpenAI's "chatcmpl-" prefix, or,
// when the backend sent none, the gateway's request id. The same chat
// answer always gets the same ids.
func responsesChatIDBase(chatID, requestID string) string {
	if b := strings.TrimPrefix(chatID, "chatcmpl-"); b != "" {
		return b
	}
	if requestID != "" {
		return requestID
	}
	return "swarmgate"
}
