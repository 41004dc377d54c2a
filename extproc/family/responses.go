package family

import (
	"net/http"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry/semconv"
)

// Responses is OpenAI's Responses API (POST /v1/responses): "input",
// "instructions", "max_output_tokens", "stream" (chatreq reads them);
// usage as input_tokens/output_tokens with input_tokens_details.cached_tokens
// and output_tokens_details.reasoning_tokens, in SSE inside the
// response.completed / response.incomplete / response.failed events
// (accounting/usage). Streams always report usage: nothing to inject.
// A previous_response_id is routed to the backend and key that created it
// by extproc (affinity.go), not refused here.
var Responses = &Spec{Name: config.FamilyResponses, Path: "/v1/responses", Method: http.MethodPost, Errors: OpenAI,
	Billed: true, EchoesRequest: true, Provider: "openai", Operation: semconv.OperationChat}

func init() { register(Responses) }
