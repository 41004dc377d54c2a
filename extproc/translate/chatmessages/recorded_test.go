package chatmessages

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestChatMessagesRecordedShapes reads every golden case's recorded
// Anthropic answer with anthropic-sdk-go, so the inputs the translation is
// reviewed on are answers Anthropic's own client accepts.
func TestChatMessagesRecordedShapes(t *testing.T) {
	dir := filepath.Join("testdata", "chat_completions_to_anthropic_messages")
	cases, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, file := range []string{"response.in.json", "response.in.sse"} {
			body, err := os.ReadFile(filepath.Join(dir, c.Name(), file))
			if err != nil {
				continue
			}
			t.Run(c.Name()+"/"+file, func(t *testing.T) {
				status := 200
				if c.Name() == "upstream_529" {
					status = 529
				}
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if filepath.Ext(file) == ".sse" {
						w.Header().Set("Content-Type", "text/event-stream")
					} else {
						w.Header().Set("Content-Type", "application/json")
					}
					w.WriteHeader(status)
					_, _ = w.Write(body)
				}))
				defer srv.Close()
				client := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("k"), aoption.WithMaxRetries(0))
				params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
				ctx := sdkContext(t)
				wantErr := status >= 400 || c.Name() == "stream_overloaded_error"
				if filepath.Ext(file) == ".json" {
					m, err := client.Messages.New(ctx, params)
					if (err != nil) != wantErr {
						t.Fatalf("err %v", err)
					}
					if err == nil && (m.ID == "" || len(m.Content) == 0 || m.StopReason == "") {
						t.Fatalf("incomplete message %+v", m)
					}
					return
				}
				stream := client.Messages.NewStreaming(ctx, params)
				defer stream.Close()
				var m anthropic.Message
				for stream.Next() {
					if err := m.Accumulate(stream.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if (stream.Err() != nil) != wantErr {
					t.Fatalf("err %v", stream.Err())
				}
				if !wantErr && (m.ID == "" || len(m.Content) == 0 || m.StopReason == "") {
					t.Fatalf("incomplete message %+v", m)
				}
			})
		}
	}
}
