package e2eenvoy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// accountingConfig: the team may hold 2,000 tokens a minute (reserved at
// admission: prompt estimate + max_tokens, settled at the end) and has a
// hard monthly budget, so every request also holds money until it settles.
// The relay streams 50 tokens over about a second.
const accountingConfig = `
request:
  message_timeout: 5s
accounting:
  token_limits: reserve
  bill_on_disconnect: delivered
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
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
    limits: {tpm: 2000}
    budget: {monthly: 100, hard_cap: true}
`

// TestPromiseReserveSettle: TPM and money are reserved at admission and
// settled to what was used, also when the client goes away mid-stream:
// nothing stays held.
func TestPromiseReserveSettle(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: accountingConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.CompletionTokens, o.InterTokenDelay = 50, 20*time.Millisecond }},
		}})
		ctx := testCtx(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.redis})
		defer rdb.Close()
		prefix := s.cfg.Redis.KeyPrefix
		tpmSum := func() (int64, error) {
			return rdb.HGet(ctx, ledger.TenantKey(prefix, "team", "rv:tpm:tenant:h"), "_sum").Int64()
		}
		money := ledger.TenantKey(prefix, "team", "rv:money:"+time.Now().UTC().Format("2006-01")+":h")
		c := s.client(keyTeam)
		big := func(text string) openai.ChatCompletionNewParams {
			return openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(1500),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
		}

		// Reserve: while one request holds ~1,500 tokens, a second asking
		// as much does not fit in 2,000 and is refused at once.
		stream := c.Chat.Completions.NewStreaming(ctx, big("first"))
		if !stream.Next() {
			t.Fatalf("first stream: %v", stream.Err())
		}
		held, err := tpmSum()
		if err != nil || held < 1500 {
			t.Fatalf("tokens held while the first stream runs: %d (%v), want its reservation", held, err)
		}
		if _, err := c.Chat.Completions.New(ctx, big("second")); statusOf(err) != http.StatusTooManyRequests {
			t.Fatalf("a second 1,500-token request while the first is held: %v, want 429", err)
		}
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		// Settle: the first used ~55 tokens; the rest is refunded, so the
		// same request now fits.
		eventually(ctx, t, "the first request settled", func() (bool, string) {
			n, err := tpmSum()
			return err == nil && n < 200, fmt.Sprintf("held %d (%v)", n, err)
		})
		if _, err := c.Chat.Completions.New(ctx, big("third")); err != nil {
			t.Fatalf("after the settle: %v", err)
		}

		// Disconnect: a client that goes away after three chunks. Its
		// reservation settles at what was delivered (bill_on_disconnect:
		// delivered), its money hold goes, and the ledger has it partial.
		dctx, cancel := context.WithCancel(ctx)
		ds := c.Chat.Completions.NewStreaming(dctx, big("goes away"))
		for i := 0; i < 3; i++ {
			if !ds.Next() {
				t.Fatalf("disconnecting stream: %v", ds.Err())
			}
		}
		cancel()
		_ = ds.Close()
		eventually(ctx, t, "the disconnected request settled", func() (bool, string) {
			n, err := tpmSum()
			if err != nil || n >= 1500 {
				return false, fmt.Sprintf("tokens held %d (%v)", n, err)
			}
			h, err := rdb.HGetAll(ctx, money).Result()
			if err != nil {
				return false, err.Error()
			}
			for k, v := range h {
				if k != "_sum" || v != "0" {
					return false, fmt.Sprintf("money still held: %v", h)
				}
			}
			u, err := s.usage(ctx, "team")
			if err != nil {
				return false, err.Error()
			}
			return u.Total.Requests == 3, fmt.Sprintf("ledger %+v", u.Total)
		})
		eventually(ctx, t, "the ledger to count the partial request", func() (bool, string) {
			_, body, err := get(ctx, s.adminURL+"/usage?tenant=team", "")
			var u struct {
				Total struct {
					Partial int64 `json:"partial"`
				} `json:"total"`
			}
			if err == nil {
				err = json.Unmarshal([]byte(body), &u)
			}
			return err == nil && u.Total.Partial == 1, fmt.Sprintf("%v %.300s", err, body)
		})
		// Nothing leaked: the next big request fits at once.
		if _, err := c.Chat.Completions.New(ctx, big("after the disconnect")); err != nil {
			t.Fatalf("after the disconnect: %v", err)
		}
		if c := s.relays["relay-a"].Total(); c.Canceled != 1 {
			t.Errorf("relay counts %+v, want the disconnect seen as one cancel", c)
		}
	})
}

// timeoutConfig: the relay answers after a second, the route gives up
// after 400 ms; bill_on_disconnect reserved bills a cut answer its whole
// reservation.
const timeoutConfig = `
request:
  message_timeout: 2s
  timeout: 400ms
accounting:
  token_limits: reserve
  bill_on_disconnect: reserved
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
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
    limits: {tpm: 20000}
    budget: {monthly: 100, hard_cap: true}
`

// TestPromiseUpstreamTimeoutBilled: Envoy gives up on a provider that had
// the request and was working on it (its route timeout: 504). The provider
// bills that request, so the ledger does too, as a cut answer
// (bill_on_disconnect), partial; the client gets upstream_timeout and the
// holds go. Before, a timed-out request left no ledger entry at all.
func TestPromiseUpstreamTimeoutBilled(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: timeoutConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.Default = mockupstream.Behavior{Latency: time.Second} }},
		}})
		ctx := testCtx(t)
		c := s.client(keyTeam)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(100),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("slow")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusGatewayTimeout || apiErr.Code != "upstream_timeout" {
			t.Fatalf("request: %v, want 504 upstream_timeout", err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: s.redis})
		defer rdb.Close()
		money := ledger.TenantKey(s.cfg.Redis.KeyPrefix, "team", "rv:money:"+time.Now().UTC().Format("2006-01")+":h")
		eventually(ctx, t, "the timed-out request billed, partial, nothing held", func() (bool, string) {
			_, body, err := get(ctx, s.adminURL+"/usage?tenant=team", "")
			var u struct {
				Total struct {
					Requests     int64 `json:"requests"`
					Partial      int64 `json:"partial"`
					OutputTokens int64 `json:"output_tokens"`
				} `json:"total"`
			}
			if err == nil {
				err = json.Unmarshal([]byte(body), &u)
			}
			if err != nil || u.Total.Requests != 1 || u.Total.Partial != 1 || u.Total.OutputTokens != 100 {
				return false, fmt.Sprintf("%v %.300s", err, body)
			}
			h, err := rdb.HGetAll(ctx, money).Result()
			if err != nil {
				return false, err.Error()
			}
			for k, v := range h {
				if k != "_sum" || v != "0" {
					return false, fmt.Sprintf("money still held: %v", h)
				}
			}
			return true, ""
		})
	})
}
