package mockupstream

import (
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
)

// TestOpenAIClient drives the mock with the official SDK, JSON and stream.
func TestOpenAIClient(t *testing.T) {
	s := start(t, Options{Auth: config.AuthBearer, Keys: testKeys(), CompletionTokens: 9, TokensPerChunk: 2, CachedTokens: 1, ReasoningTokens: 3})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("twelve bytes")},
	}
	ctx := testCtx(t)

	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokens != 3 || resp.Usage.CompletionTokens != 9 || resp.Usage.PromptTokensDetails.CachedTokens != 1 ||
		resp.Usage.CompletionTokensDetails.ReasoningTokens != 3 || resp.Choices[0].Message.Content != tokenText(0, 6) {
		t.Fatalf("response %+v", resp)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// role + 3 content chunks + finish + usage
	if chunks != 6 || acc.Usage.TotalTokens != 12 || acc.Usage.CompletionTokensDetails.ReasoningTokens != 3 || acc.Choices[0].Message.Content != tokenText(0, 6) {
		t.Fatalf("%d chunks, accumulated %+v", chunks, acc.ChatCompletion)
	}
	if r := s.Requests(); !r[1].Stream || !r[1].IncludeUsage || r[1].Outcome != "ok" {
		t.Fatalf("record %+v", r[1])
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 3 || len(emb.Data[2].Embedding) != 8 || emb.Usage.PromptTokens != 1 {
		t.Fatalf("embeddings %+v", emb)
	}

	bad := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	_, err = bad.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Fatalf("want a 401 SDK error, got %v", err)
	}

	s.SetBehavior("a", Behavior{Action: ActRateLimit})
	_, err = client.Chat.Completions.New(ctx, params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type != "requests" {
		t.Fatalf("want a 429 SDK error, got %v", err)
	}
}
