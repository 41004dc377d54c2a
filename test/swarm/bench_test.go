package swarm

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// The swarm's agents use the openai-go SDK. These compare its per-request
// cost with plain HTTP against a mock relay with no delays, to show the
// SDK's share of a swarm run's CPU.
func benchRelay(b *testing.B) *mockupstream.Server {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	m := mockupstream.New(mockupstream.Options{Keys: []mockupstream.Key{{ID: "k", Value: "sk-bench"}}, Models: []string{model},
		CompletionTokens: 8, MaxRecords: 1})
	if _, err := m.Start(ctx, "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}

func BenchmarkAgentRequest(b *testing.B) {
	m := benchRelay(b)
	base := "http://" + m.Addr().String()
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		c := sdkClient(base, "sk-bench", newHTTPClient())
		p := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Plan the next step of the task.")}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Chat.Completions.New(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		hc := newHTTPClient()
		b.ReportAllocs()
		for b.Loop() {
			if r := post(ctx, hc, base, "sk-bench", ""); r.err != nil || r.status != 200 {
				b.Fatal(r.status, r.err)
			}
		}
	})
}
