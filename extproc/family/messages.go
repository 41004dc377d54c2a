package family

import (
	"net/http"

	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry/semconv"
)

const messagesPath = "/v1/messages"

// Messages is Anthropic's Messages API (POST /v1/messages): "system",
// "messages" of text/image/tool_use/tool_result blocks, "tools", "stream"
// and a required "max_tokens" (chatreq reads them); usage input_tokens,
// output_tokens, cache_creation_input_tokens, cache_read_input_tokens, in
// SSE from message_start plus the cumulative message_delta
// (accounting/usage). Refusals in Anthropic's error shape; the upstream
// attempt sends anthropic-version (and anthropic-beta) to Anthropic-style
// backends only.
var Messages = &Spec{Name: config.FamilyAnthropicMessages, Path: messagesPath, Method: http.MethodPost, Errors: Anthropic,
	Billed: true, Validate: validateMessages, Provider: "anthropic", Operation: semconv.OperationChat}

// CountTokens is POST /v1/messages/count_tokens: admitted and routed like
// Messages (same backends, keys and breakers), never billed as a
// completion and reserving no output.
var CountTokens = &Spec{Name: config.FamilyAnthropicMessages, Path: messagesPath + "/count_tokens", Method: http.MethodPost,
	Errors: Anthropic, NoOutput: true, Untranslated: true, Provider: "anthropic", Operation: OperationCountTokens}

// OperationCountTokens names count_tokens in its span: no GenAI semantic
// convention names it, and it is no chat.
const OperationCountTokens = "count_tokens"

func init() {
	register(Messages)
	register(CountTokens)
}

func validateMessages(r chatreq.Request) *Refusal {
	if !r.HasMaxTokens {
		return &Refusal{Param: "max_tokens", Code: "invalid_value", Message: "max_tokens: Field required"}
	}
	return nil
}

// DefaultAnthropicVersion is sent to an Anthropic-style backend when the
// client named none (its SDKs always do).
const DefaultAnthropicVersion = "2023-06-01"
