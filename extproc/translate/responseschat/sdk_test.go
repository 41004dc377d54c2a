package responseschat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/responses"
	"github.com/swarmgate/swarmgate/extproc/translate"
)

// sdkBackend is an httptest server in front of a recorded chat
// completions answer: it translates the SDK's Responses request (and checks
// the chat body is JSON), then answers with the recorded chat answer
// translated back, as the gateway would.
func sdkBackend(t *testing.T, fixture string, status int) (*openai.Client, func() map[string]any) {
	t.Helper()
	tr := New()
	answer, err := os.ReadFile(filepath.Join("testdata", "responses_to_chat_completions", fixture))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var chatReq map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/responses" {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		out, err := tr.Request(body, translate.RequestOptions{Model: "upstream-model"})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			http.Error(w, "chat body is not JSON: "+err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		chatReq = m
		mu.Unlock()
		stream := m["stream"] == true
		resp := tr.NewResponse(translate.ResponseOptions{Status: status, Stream: stream, RequestID: "sg-sdk", Created: 1764806400})
		var dst []byte
		// Chunks of an odd size, as Envoy may hand them over.
		for i := 0; i < len(answer); i += 37 {
			j := min(i+37, len(answer))
			if dst, err = resp.Write(dst, answer[i:j], j == len(answer)); err != nil {
				t.Errorf("translate: %v", err)
				return
			}
		}
		if stream && status < 400 {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write(dst)
	}))
	t.Cleanup(srv.Close)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c, func() map[string]any { mu.Lock(); defer mu.Unlock(); return chatReq }
}

// sdkParams is a request with most of what the translation
// reads, serialised by the SDK itself.
func sdkParams() responses.ResponseNewParams {
	call := responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call_1", "get_weather")
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp_c":14}`)
	out.OfFunctionCallOutput.CallID = openai.String("call_1")
	return responses.ResponseNewParams{
		Model:        "gpt-4.1",
		Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
			call, out,
		}},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather",
			map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)},
		MaxOutputTokens: openai.Int(256),
		Temperature:     openai.Float(0.2),
		Store:           openai.Bool(false),
	}
}

// checkRequired fails the test for a field openai-go marks
// api:"required" that the translated Response lacks or has in a shape the
// SDK could not read.
func checkRequired(t *testing.T, r *responses.Response) {
	t.Helper()
	typ := reflect.TypeOf(*r)
	meta := reflect.ValueOf(r.JSON)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !strings.Contains(f.Tag.Get("api"), "required") {
			continue
		}
		fv, ok := meta.FieldByName(f.Name).Interface().(respjson.Field)
		if !ok {
			continue
		}
		if fv.Raw() == respjson.Omitted {
			t.Errorf("required field %s is missing", f.Tag.Get("json"))
		} else if !fv.Valid() && fv.Raw() != respjson.Null {
			t.Errorf("required field %s is not in the SDK's shape: %s", f.Tag.Get("json"), fv.Raw())
		}
	}
}

func TestResponsesChatSDKJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("text", func(t *testing.T) {
		c, chatReq := sdkBackend(t, "string_input/response.in.json", 200)
		r, err := c.Responses.New(ctx, sdkParams())
		if err != nil {
			t.Fatal(err)
		}
		checkRequired(t, r)
		if got, want := r.OutputText(), "Under a silver moon, a gentle unicorn named Lumi sang the stars to sleep."; got != want {
			t.Errorf("OutputText = %q, want %q", got, want)
		}
		if r.Status != responses.ResponseStatusCompleted || r.ID != "resp_CXfT0aQ8bq3mJ2" {
			t.Errorf("status %q id %q", r.Status, r.ID)
		}
		if r.Usage.InputTokens != 18 || r.Usage.OutputTokens != 19 || r.Usage.TotalTokens != 37 {
			t.Errorf("usage = %+v", r.Usage)
		}
		m := chatReq()
		if msgs, _ := m["messages"].([]any); len(msgs) != 4 || m["max_tokens"] != 256.0 {
			t.Errorf("chat request = %v", m)
		}
	})

	t.Run("function call", func(t *testing.T) {
		c, _ := sdkBackend(t, "multi_turn_function_calls/response.in.json", 200)
		r, err := c.Responses.New(ctx, sdkParams())
		if err != nil {
			t.Fatal(err)
		}
		checkRequired(t, r)
		if len(r.Output) != 1 {
			t.Fatalf("output = %+v", r.Output)
		}
		fc := r.Output[0].AsFunctionCall()
		if fc.CallID != "call_Lyon4" || fc.Name != "get_forecast" || fc.Arguments != `{"city":"Lyon","days":1}` {
			t.Errorf("function call = %+v", fc)
		}
	})

	t.Run("incomplete with cached and reasoning usage", func(t *testing.T) {
		c, _ := sdkBackend(t, "max_output_tokens_incomplete/response.in.json", 200)
		r, err := c.Responses.New(ctx, sdkParams())
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != responses.ResponseStatusIncomplete || r.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("status %q incomplete %+v", r.Status, r.IncompleteDetails)
		}
		c, _ = sdkBackend(t, "reasoning_effort/response.in.json", 200)
		if r, err = c.Responses.New(ctx, sdkParams()); err != nil {
			t.Fatal(err)
		}
		if r.Usage.InputTokensDetails.CachedTokens != 1152 || r.Usage.OutputTokensDetails.ReasoningTokens != 384 {
			t.Errorf("usage = %+v", r.Usage)
		}
	})

	t.Run("upstream 429", func(t *testing.T) {
		c, _ := sdkBackend(t, "upstream_429/response.in.json", 429)
		_, err := c.Responses.New(ctx, sdkParams())
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("err = %v, want *openai.Error", err)
		}
		if apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || !strings.HasPrefix(apiErr.Message, "Rate limit reached") {
			t.Errorf("err = %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Message)
		}
	})
}

// sdkCollected is what sdkStream reads from a translated stream with the
// SDK: the text and argument deltas, the final event's response, and every
// event type.
type sdkCollected struct {
	text  string
	args  map[string]string
	done  map[string]string // function_call_arguments.done by item id
	final responses.Response
	types []string
}

func sdkStream(t *testing.T, fixture string) sdkCollected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, chatReq := sdkBackend(t, fixture, 200)
	stream := c.Responses.NewStreaming(ctx, sdkParams())
	defer stream.Close()
	got := sdkCollected{args: map[string]string{}, done: map[string]string{}}
	var seq int64
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Errorf("%s: sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		got.types = append(got.types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			got.args[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.done":
			got.done[ev.ItemID] = ev.Arguments
		case "response.completed", "response.incomplete", "response.failed":
			got.final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got.text = text.String()
	m := chatReq()
	if so, _ := m["stream_options"].(map[string]any); m["stream"] != true || so["include_usage"] != true {
		t.Errorf("chat request stream fields = %v %v", m["stream"], m["stream_options"])
	}
	return got
}

func TestResponsesChatSDKStream(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		got := sdkStream(t, "stream_text/response.in.sse")
		want := "Bonjour ! ¡Hola!\nThat's \"hello\"."
		if got.text != want || got.final.OutputText() != want {
			t.Errorf("deltas %q, final %q, want %q", got.text, got.final.OutputText(), want)
		}
		if got.final.Status != responses.ResponseStatusCompleted || got.final.Usage.TotalTokens != 29 {
			t.Errorf("final = %s %+v", got.final.Status, got.final.Usage)
		}
		checkRequired(t, &got.final)
		if got.types[0] != "response.created" || got.types[1] != "response.in_progress" {
			t.Errorf("types = %v", got.types)
		}
	})

	t.Run("parallel tool calls", func(t *testing.T) {
		got := sdkStream(t, "stream_parallel_tool_calls/response.in.sse")
		want := map[string]string{"fc_CXfZ6gTools_0": `{"city": "Paris"}`, "fc_CXfZ6gTools_1": `{"city": "Tokyo"}`}
		if !reflect.DeepEqual(got.args, want) || !reflect.DeepEqual(got.done, want) {
			t.Errorf("deltas %v, done %v, want %v", got.args, got.done, want)
		}
		if len(got.final.Output) != 2 {
			t.Fatalf("final output = %+v", got.final.Output)
		}
		for i, city := range []string{"Paris", "Tokyo"} {
			fc := got.final.Output[i].AsFunctionCall()
			if fc.Name != "get_weather" || !strings.Contains(fc.Arguments, city) || fc.Status != "completed" {
				t.Errorf("output[%d] = %+v", i, fc)
			}
		}
	})

	t.Run("cached and reasoning usage", func(t *testing.T) {
		got := sdkStream(t, "stream_cached_reasoning_usage/response.in.sse")
		u := got.final.Usage
		if u.InputTokens != 2048 || u.InputTokensDetails.CachedTokens != 1920 || u.OutputTokens != 530 || u.OutputTokensDetails.ReasoningTokens != 448 {
			t.Errorf("usage = %+v", u)
		}
	})

	t.Run("incomplete", func(t *testing.T) {
		got := sdkStream(t, "stream_text_then_tool_call_incomplete/response.in.sse")
		if got.final.Status != responses.ResponseStatusIncomplete || got.final.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("final = %s %+v", got.final.Status, got.final.IncompleteDetails)
		}
	})

	t.Run("mid-stream error", func(t *testing.T) {
		got := sdkStream(t, "stream_mid_error/response.in.sse")
		if got.final.Status != responses.ResponseStatusFailed || got.final.Error.Code != "server_error" ||
			!strings.HasPrefix(got.final.Error.Message, "The server had an error") {
			t.Errorf("final = %s %+v", got.final.Status, got.final.Error)
		}
		if got.types[len(got.types)-1] != "response.failed" {
			t.Errorf("types = %v", got.types)
		}
	})
}
