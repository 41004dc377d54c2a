package mockupstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/config"
)

// TestResponsesClient drives POST /v1/responses with the official SDK,
// JSON and stream: the shapes parse, usage carries cached and reasoning
// tokens, and a stream names its events from response.created to
// response.completed.
func TestResponsesClient(t *testing.T) {
	s := start(t, Options{Auth: config.AuthBearer, Keys: testKeys(), CompletionTokens: 9, TokensPerChunk: 2, CachedTokens: 1, ReasoningTokens: 3})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	ctx := testCtx(t)
	params := responses.ResponseNewParams{Model: "gpt-4o-mini", Instructions: openai.String("four"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("twelve bytes")}}

	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	// prompt: 12 + 4 bytes at 4 bytes per token
	u := resp.Usage
	if u.InputTokens != 4 || u.OutputTokens != 9 || u.InputTokensDetails.CachedTokens != 1 || u.OutputTokensDetails.ReasoningTokens != 3 ||
		u.TotalTokens != 13 || resp.OutputText() != tokenText(0, 6) || resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") {
		t.Fatalf("response %+v", resp)
	}

	stream := client.Responses.NewStreaming(ctx, params)
	var names []string
	var text strings.Builder
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		names = append(names, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.delta response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if text.String() != tokenText(0, 6) || final.Usage.OutputTokens != 9 || final.Usage.InputTokensDetails.CachedTokens != 1 {
		t.Fatalf("streamed %q, final %+v", text.String(), final.Usage)
	}
	r := s.Requests()[1]
	if r.Endpoint != "responses" || !r.Stream || r.ResponseID == "" || r.CachedTokens != 1 || r.ReasoningTokens != 3 || r.Outcome != "ok" {
		t.Fatalf("record %+v", r)
	}
}

// TestResponsesIncomplete: max_output_tokens cuts the answer, as OpenAI
// reports it (status incomplete, reason max_output_tokens).
func TestResponsesIncomplete(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), CompletionTokens: 9})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(4),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	resp, err := client.Responses.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.Usage.OutputTokens != 4 {
		t.Fatalf("response %+v", resp)
	}
	stream := client.Responses.NewStreaming(testCtx(t), params)
	last := ""
	for stream.Next() {
		last = stream.Current().Type
	}
	if stream.Err() != nil || last != "response.incomplete" {
		t.Fatalf("last event %q, err %v", last, stream.Err())
	}
}

// TestPreviousResponseKnownToItsKey: a response id is known only to the
// key that created it (the organisation boundary the gateway's affinity
// must respect).
func TestPreviousResponseKnownToItsKey(t *testing.T) {
	s := start(t, Options{Keys: testKeys()})
	ctx := testCtx(t)
	a := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	b := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyB), option.WithMaxRetries(0))
	first, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	next := responses.ResponseNewParams{Model: "gpt-4o-mini", PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")}}
	if resp, err := a.Responses.New(ctx, next); err != nil || resp.PreviousResponseID != first.ID {
		t.Fatalf("same key: %v %+v", err, resp)
	}
	_, err = b.Responses.New(ctx, next)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "previous_response_not_found" {
		t.Fatalf("other key: want 404 previous_response_not_found, got %v", err)
	}
}
