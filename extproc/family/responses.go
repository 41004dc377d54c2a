package family

import (
	"net/http"

	"github.com/swarmgate/swarmgate/chatreq"
	"github.com/swarmgate/swarmgate/config"
	"github.com/swarmgate/swarmgate/telemetry"
)

// Responses is OpenAI's Responses API (POST /v1/responses): "input",
// "instructions", "max_output_tokens", "stream" (chatreq reads them);
// usage as input_tokens/output_tokens with input_tokens_details.cached_tokens
// and output_tokens_details.reasoning_tokens, in SSE inside the
// response.completed / response.incomplete / response.failed events
// (accounting/usage). Streams always report usage: nothing to inject.
var Responses = &Spec{Name: config.FamilyResponses, Path: "/v1/responses", Method: http.MethodPost, Errors: OpenAI,
	Billed: true, Validate: validateResponses, Provider: "openai", Operation: telemetry.OperationChat}

func init() { register(Responses) }

// validateResponses refuses server-side state the gateway cannot route
// correctly: a previous_response_id lives with the backend and key
// (organisation) that created it, and swarmgate does not record that
// affinity yet (docs/families.md). Sending it to another key fails at the
// provider after the request was admitted and billed for its estimate.
func validateResponses(r chatreq.Request) *Refusal {
	if r.PreviousResponseID {
		return &Refusal{Param: "previous_response_id", Code: "unsupported_parameter",
			Message: "previous_response_id is not supported through this gateway: send the conversation as input items (or use store: false with the full history)."}
	}
	return nil
}
