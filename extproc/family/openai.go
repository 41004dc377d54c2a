package family

import (
	"net/http"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry/semconv"
)

// The OpenAI families swarmgate served before families existed: request
// fields and usage as chatreq and accounting/usage read them.
func init() {
	register(&Spec{Name: config.FamilyChatCompletions, Path: "/v1/chat/completions", Method: http.MethodPost, Errors: OpenAI,
		Billed: true, InjectUsage: true, Provider: "openai", Operation: semconv.OperationChat})
	register(&Spec{Name: config.FamilyCompletions, Path: "/v1/completions", Method: http.MethodPost, Errors: OpenAI,
		Billed: true, InjectUsage: true, Provider: "openai", Operation: semconv.OperationTextCompletion})
	register(&Spec{Name: config.FamilyEmbeddings, Path: "/v1/embeddings", Method: http.MethodPost, Errors: OpenAI,
		Billed: true, NoOutput: true, Provider: "openai", Operation: semconv.OperationEmbeddings})
}
