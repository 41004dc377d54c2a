package e2eenvoy

import (
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// TestTranslationPairsThroughEnvoy: every translation pair, JSON and SSE,
// through the real Envoy with the official Go SDKs: OpenAI chat clients on
// an Anthropic provider, Responses clients and Anthropic Messages clients
// on a chat-completions relay. Each answer is whole in the client's own
// API (text, the 7 completion tokens the provider counted, the alias as
// the model), and the provider saw its own API.
func TestTranslationPairsThroughEnvoy(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, nil)
		ctx := testCtx(t)
		served := func(t *testing.T, m *mockupstream.Server, endpoint string, stream bool) {
			t.Helper()
			rs := m.Requests()
			if len(rs) == 0 {
				t.Fatal("the provider saw no request")
			}
			last := rs[len(rs)-1]
			if last.Endpoint != endpoint || last.Stream != stream || last.Status != 200 {
				t.Errorf("the provider saw %s stream=%v status %d, want %s stream=%v 200", last.Endpoint, last.Stream, last.Status, endpoint, stream)
			}
		}

		t.Run("chat to Messages", func(t *testing.T) {
			c := openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(keyTeam), option.WithMaxRetries(0))
			p := openai.ChatCompletionNewParams{Model: "claude-native",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")}}
			out, err := c.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Choices) == 0 || out.Choices[0].Message.Content == "" || out.Usage.CompletionTokens != 7 || out.Model != "claude-native" {
				t.Errorf("JSON: %+v", out)
			}
			served(t, s.ant, "messages", false)

			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			st := c.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			for st.Next() {
				acc.AddChunk(st.Current())
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 7 || acc.Model != "claude-native" {
				t.Errorf("SSE: %+v", acc.ChatCompletion)
			}
			served(t, s.ant, "messages", true)
		})

		t.Run("Responses to chat", func(t *testing.T) {
			c := openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(keyTeam), option.WithMaxRetries(0))
			p := responses.ResponseNewParams{Model: "codex-relay", Instructions: openai.String("be brief"),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}}
			out, err := c.Responses.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.OutputText() == "" || out.Usage.OutputTokens != 7 || out.Model != "codex-relay" || out.Status != "completed" {
				t.Errorf("JSON: %+v", out)
			}
			served(t, s.relay, "chat", false)

			st := c.Responses.NewStreaming(ctx, p)
			var done responses.Response
			text := ""
			for st.Next() {
				switch ev := st.Current(); ev.Type {
				case "response.output_text.delta":
					text += ev.Delta
				case "response.completed":
					done = ev.Response
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if text == "" || done.OutputText() != text || done.Usage.OutputTokens != 7 || done.Model != "codex-relay" {
				t.Errorf("SSE: text %q, completed %+v", text, done)
			}
			served(t, s.relay, "chat", true)
		})

		t.Run("Messages to chat", func(t *testing.T) {
			c := anthropic.NewClient(aoption.WithBaseURL(s.envoyURL), aoption.WithAPIKey(keyTeam), aoption.WithMaxRetries(0))
			p := anthropic.MessageNewParams{Model: "claude-relay", MaxTokens: 64,
				System:   []anthropic.TextBlockParam{{Text: "be brief"}},
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
			out, err := c.Messages.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Content) == 0 || out.Content[0].Text == "" || out.Usage.OutputTokens != 7 || string(out.Model) != "claude-relay" {
				t.Errorf("JSON: %+v", out)
			}
			served(t, s.relay, "chat", false)

			st := c.Messages.NewStreaming(ctx, p)
			var msg anthropic.Message
			for st.Next() {
				if err := msg.Accumulate(st.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.Usage.OutputTokens != 7 || string(msg.Model) != "claude-relay" {
				t.Errorf("SSE: %+v", msg)
			}
			served(t, s.relay, "chat", true)
		})

		// A provider's refusal reaches each client in its own API's shape.
		t.Run("provider errors in the client's shape", func(t *testing.T) {
			s.relay.SetBehavior("ag_relay", mockupstream.Behavior{Action: mockupstream.ActError, Status: 400})
			s.ant.SetBehavior("ag_ant", mockupstream.Behavior{Action: mockupstream.ActError, Status: 400})
			defer s.relay.SetBehavior("ag_relay", mockupstream.Behavior{})
			defer s.ant.SetBehavior("ag_ant", mockupstream.Behavior{})

			ac := anthropic.NewClient(aoption.WithBaseURL(s.envoyURL), aoption.WithAPIKey(keyTeam), aoption.WithMaxRetries(0))
			_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-relay", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
			var aerr *anthropic.Error
			if !errors.As(err, &aerr) || aerr.StatusCode != 400 || !strings.Contains(aerr.RawJSON(), `"type":"error"`) ||
				!strings.Contains(aerr.RawJSON(), `"invalid_request_error"`) {
				t.Errorf("Messages on the relay: %v", err)
			}

			oc := openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(keyTeam), option.WithMaxRetries(0))
			_, err = oc.Responses.New(ctx, responses.ResponseNewParams{Model: "codex-relay",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}})
			var oerr *openai.Error
			if !errors.As(err, &oerr) || oerr.StatusCode != 400 || oerr.Message == "" {
				t.Errorf("Responses on the relay: %v", err)
			}

			_, err = oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-native",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
			if !errors.As(err, &oerr) || oerr.StatusCode != 400 || oerr.Message == "" || strings.Contains(oerr.RawJSON(), `"type":"error"`) {
				t.Errorf("chat on the Anthropic provider: %v", err)
			}

			// The chat relay's 503 is Anthropic's overloaded: 529 with
			// overloaded_error, as Anthropic itself answers it.
			s.relay.SetBehavior("ag_relay", mockupstream.Behavior{Action: mockupstream.ActError, Status: 503})
			_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-relay", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
			if !errors.As(err, &aerr) || aerr.StatusCode != 529 || !strings.Contains(aerr.RawJSON(), `"overloaded_error"`) {
				t.Errorf("Messages on the relay answering 503: %v", err)
			}
		})
	})
}
