package e2eenvoy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// TestChatThroughEnvoy: the SDK's plain and streamed chat completions reach
// the priority-0 relay through Envoy, with the upstream key set by the
// per-attempt ext_proc filter, and the client's own key never leaves Envoy.
func TestChatThroughEnvoy(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startStack(t, r)
		ctx := testCtx(t)

		resp, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "hello through a real Envoy")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" {
			t.Errorf("empty completion: %+v", resp)
		}
		if resp.Usage.CompletionTokens != 7 || resp.Usage.PromptTokens == 0 {
			t.Errorf("usage = %+v, want 7 completion tokens and a prompt count", resp.Usage)
		}
		if got := s.relayA.Total().OK; got != 1 {
			t.Errorf("relay-a answered %d requests, want 1 (priority 0)", got)
		}
		if got := s.relayB.Total().Requests; got != 0 {
			t.Errorf("relay-b saw %d requests, want 0", got)
		}
		for _, r := range s.relayA.Requests() {
			if r.KeyID == "" {
				t.Errorf("relay-a request without an accepted upstream key: %+v", r)
			}
		}

		c := s.client(keyTeam)
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" {
			t.Errorf("stream: %d chunks, accumulated %+v", chunks, acc.ChatCompletion)
		}

		// An unknown virtual key is refused by ext_proc with an OpenAI-shaped
		// error before any upstream sees it.
		before := s.relayA.Total().Requests
		if _, err := s.chat(ctx, "sk-not-a-tenant", "gpt-4o-mini", "hi"); statusOf(err) != http.StatusUnauthorized {
			t.Errorf("unknown key: err %v, want 401", err)
		}
		if s.relayA.Total().Requests != before {
			t.Error("a refused request reached the relay")
		}
	})
}

// TestKeyRotationOn429: one key of relay-a answers 429; every request still
// succeeds on relay-a's other key (the retry's upstream filter picks a key
// other than the one that failed, then the key's breaker keeps it out).
func TestKeyRotationOn429(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startStack(t, r)
		ctx := testCtx(t)
		s.relayA.SetBehavior("relay-a-1", mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 30 * time.Second})

		const n = 6
		for i := range n {
			if _, err := s.chat(ctx, keyTeam, "solo", fmt.Sprintf("request %d", i)); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		one, two := s.relayA.Count("relay-a-1"), s.relayA.Count("relay-a-2")
		if two.OK != n {
			t.Errorf("relay-a-2 answered %d of %d requests (relay-a-1: %+v)", two.OK, n, one)
		}
		if one.Requests > 1 {
			t.Errorf("relay-a-1 got %d requests after its first 429; its breaker should keep it out", one.Requests)
		}
		if one.OK != 0 {
			t.Errorf("relay-a-1 answered OK %d times while rate limited", one.OK)
		}
	})
}

// TestFailoverToNextPriority: every relay-a key fails with 500; the retry
// moves to relay-b (priority 1, previous_priorities), and once relay-a has
// no usable key the control plane marks it unhealthy in EDS so requests go
// straight to relay-b.
func TestFailoverToNextPriority(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startStack(t, r)
		ctx := testCtx(t)
		fail := mockupstream.Behavior{Action: mockupstream.ActError, Status: http.StatusInternalServerError}
		s.relayA.SetBehavior("relay-a-1", fail)
		s.relayA.SetBehavior("relay-a-2", fail)

		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "first"); err != nil {
			t.Fatalf("first request did not fail over: %v", err)
		}
		if s.relayB.Total().OK != 1 {
			t.Errorf("relay-b answered %d, want the failed-over first request", s.relayB.Total().OK)
		}
		// Eventually three requests in a row succeed without touching relay-a.
		streak := 0
		eventually(ctx, t, "relay-a drained by EDS", func() (bool, string) {
			before := s.relayA.Total().Requests
			_, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "again")
			if err != nil || s.relayA.Total().Requests != before {
				streak = 0
				return false, fmt.Sprintf("err %v, relay-a requests %d→%d", err, before, s.relayA.Total().Requests)
			}
			streak++
			return streak >= 3, fmt.Sprintf("streak %d", streak)
		})
	})
}

// TestTenantRateLimit: the limited tenant may make 2 requests a minute;
// Envoy's rate-limit filter, asking the embedded rate-limit service (Redis
// counters), refuses the next with a 429 that never reaches a relay.
func TestTenantRateLimit(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startStack(t, r)
		ctx := testCtx(t)
		ok, limited := 0, 0
		// Five tries: a minute boundary can fall between them once.
		for i := range 5 {
			_, err := s.chat(ctx, keyLimited, "gpt-4o-mini", fmt.Sprintf("try %d", i))
			switch {
			case err == nil:
				ok++
			case statusOf(err) == http.StatusTooManyRequests:
				limited++
			default:
				t.Fatalf("try %d: %v", i, err)
			}
		}
		if limited == 0 || ok > 4 {
			t.Errorf("%d allowed, %d limited; want the rpm: 2 limit to refuse some", ok, limited)
		}
		if got := s.relayA.Total().Requests + s.relayB.Total().Requests; got != ok {
			t.Errorf("relays saw %d requests, %d were allowed", got, ok)
		}
		// Other tenants are not affected.
		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "other tenant"); err != nil {
			t.Errorf("team request: %v", err)
		}
	})
}

// TestUsageCounted: the ledger (admin /usage) holds the provider-reported
// tokens of requests served through Envoy, plain and streamed.
func TestUsageCounted(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startStack(t, r)
		ctx := testCtx(t)
		resp, err := s.chat(ctx, keyTeam, "gpt-4o-mini", strings.Repeat("count my tokens ", 20))
		if err != nil {
			t.Fatal(err)
		}
		c := s.client(keyTeam)
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("and these")},
		})
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		// Both completions report 7 tokens (mockupstream CompletionTokens).
		eventually(ctx, t, "the ledger to hold both requests", func() (bool, string) {
			u, err := s.usage(ctx, "team")
			if err != nil {
				return false, err.Error()
			}
			tot := u.Total
			return tot.Requests == 2 && tot.OutputTokens == 14 && tot.InputTokens > resp.Usage.PromptTokens,
				fmt.Sprintf("%+v (first request: %d prompt tokens)", tot, resp.Usage.PromptTokens)
		})
	})
}
