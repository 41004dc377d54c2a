package e2eenvoy

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

const longAnswerConfig = `
accounting:
  bill_on_disconnect: delivered
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    families: [responses]
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, price: {input_per_mtok: 1000, output_per_mtok: 1000}}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseLongResponsesAnswerBilled: a streamed Responses API answer
// long enough that its last event, which restates the whole answer, passes
// the gateway's 1 MiB event cap is billed the usage that event reports,
// not an estimate from the text delivered (through Envoy, the official
// SDK reading the stream to its end).
func TestPromiseLongResponsesAnswerBilled(t *testing.T) {
	// About 1.3 MB of text, restated whole by response.completed. The
	// reasoning tokens are what no estimate from the delivered text knows.
	const output, reasoning = 320000, 40000
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: longAnswerConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.TokensPerChunk = 5000 }},
		}})
		ctx := testCtx(t)
		c := s.client(keyTeam)
		st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("write at length")}},
			option.WithHeader("x-mock-completion-tokens", fmt.Sprint(output)), option.WithHeader("x-mock-reasoning-tokens", fmt.Sprint(reasoning)))
		var done responses.Response
		for st.Next() {
			if ev := st.Current(); ev.Type == "response.completed" {
				done = ev.Response
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if done.Usage.OutputTokens != output || len(done.OutputText()) < 1<<20 {
			t.Fatalf("completed: %d output tokens, %d bytes of text", done.Usage.OutputTokens, len(done.OutputText()))
		}
		eventually(ctx, t, "the answer billed its reported usage", func() (bool, string) {
			_, body, err := get(ctx, s.adminURL+"/usage?tenant=team", "")
			var u struct {
				Total struct {
					Requests     int64 `json:"requests"`
					Partial      int64 `json:"partial"`
					InputTokens  int64 `json:"input_tokens"`
					OutputTokens int64 `json:"output_tokens"`
					Reasoning    int64 `json:"reasoning_tokens"`
				} `json:"total"`
			}
			if err == nil {
				err = json.Unmarshal([]byte(body), &u)
			}
			want := done.Usage.InputTokens
			if err != nil || u.Total.Requests != 1 || u.Total.Partial != 0 || u.Total.OutputTokens != output || u.Total.Reasoning != reasoning ||
				u.Total.InputTokens != want {
				return false, fmt.Sprintf("%v %.300s (want %d input tokens)", err, body, want)
			}
			return true, ""
		})
	})
}
