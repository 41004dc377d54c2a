package e2eenvoy

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// TestPromiseSubkeyLimits: a sub-key's own rpm, rpd and tpm are enforced
// by the real rate-limit service through Envoy's rate-limit filter, with
// no sub-key in the service's config: the fourth request of a 3 rpm key in
// a minute is refused 429 in the client's shape with Retry-After, another
// sub-key of the same tenant and the tenant's config key are unaffected,
// and the tokens a key's answers used refuse its next request.
func TestPromiseSubkeyLimits(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: subkeysConfig,
			relays: []relaySpec{{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}}}})
		ctx := testCtx(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.redis})
		t.Cleanup(func() { _ = rdb.Close() })
		store := subkey.NewStore(rdb, "sg:subkey:", nil)
		mint := func(l config.Limits) (*subkey.Key, string) {
			t.Helper()
			k, plain, err := store.Create(ctx, subkey.Key{Tenant: "team", Parent: "team-1", Limits: l})
			if err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, "the new sub-key accepted", func() (bool, string) {
				status, code := s.chatRefusal(ctx, plain)
				return status != http.StatusUnauthorized, fmt.Sprint(status, code)
			})
			return k, plain
		}
		// Minting waits for one served request per key: it is the first of
		// each key's window.
		avoidMinuteEdge(t, 35*time.Second)
		minute := time.Now().Truncate(time.Minute)
		a, keyA := mint(config.Limits{RPM: 3})
		b, keyB := mint(config.Limits{RPM: 3})
		_, keyD := mint(config.Limits{RPD: 2})
		tk, keyT := mint(config.Limits{TPM: 300})
		free, keyFree := mint(config.Limits{})

		t.Run("rpm 3: the fourth request in a minute is refused", func(t *testing.T) {
			for i := 2; i <= 3; i++ {
				if _, err := s.chat(ctx, keyA, "gpt-4o-mini", "a "+strconv.Itoa(i)); err != nil {
					t.Fatalf("request %d of key A: %v", i, err)
				}
			}
			_, err := s.chat(ctx, keyA, "gpt-4o-mini", "a 4")
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
				t.Fatalf("fourth request of key A: %v, want 429 rate_limit_exceeded", err)
			}
			if !strings.Contains(apiErr.Message, a.ID) {
				t.Errorf("message %q does not name the key", apiErr.Message)
			}
			ra, convErr := strconv.Atoi(apiErr.Response.Header.Get("retry-after"))
			if convErr != nil || ra < 1 || ra > 60 {
				t.Errorf("retry-after %q, want the seconds to the next minute", apiErr.Response.Header.Get("retry-after"))
			}
			// Anthropic's clients get it in their shape.
			ac := s.anthropicClient(keyA)
			_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 16,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("a 5"))}})
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.Type() != "rate_limit_error" ||
				ae.Response.Header.Get("retry-after") == "" {
				t.Errorf("Anthropic client on key A: %v, want 429 rate_limit_error with retry-after", err)
			}
		})

		t.Run("another sub-key of the tenant and its config key are unaffected", func(t *testing.T) {
			for i := 2; i <= 3; i++ {
				if _, err := s.chat(ctx, keyB, "gpt-4o-mini", "b "+strconv.Itoa(i)); err != nil {
					t.Errorf("request %d of key B after key A was refused: %v", i, err)
				}
			}
			for i := range 6 {
				if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "config "+strconv.Itoa(i)); err != nil {
					t.Errorf("config key request %d: %v", i+1, err)
				}
				if _, err := s.chat(ctx, keyFree, "gpt-4o-mini", "free "+strconv.Itoa(i)); err != nil {
					t.Errorf("unlimited sub-key request %d: %v", i+1, err)
				}
			}
		})

		t.Run("rpd 2: the third request of the day is refused", func(t *testing.T) {
			if _, err := s.chat(ctx, keyD, "gpt-4o-mini", "d 2"); err != nil {
				t.Fatalf("second request of key D: %v", err)
			}
			_, err := s.chat(ctx, keyD, "gpt-4o-mini", "d 3")
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("third request of key D: %v, want 429", err)
			}
			// The day's window resets at 00:00 UTC, not within the minute.
			if ra, _ := strconv.Atoi(apiErr.Response.Header.Get("retry-after")); ra <= 60 && time.Until(time.Now().UTC().Truncate(24*time.Hour).Add(24*time.Hour)) > 2*time.Minute {
				t.Errorf("retry-after %d s for a daily limit", ra)
			}
		})

		// tpm 300: the answers' tokens are charged when the exchange is
		// done (hits_addend from ext_proc's usage metadata), so a 400-token
		// answer refuses the key's next request although every prompt
		// estimate is far below 300.
		t.Run("tpm counted from usage", func(t *testing.T) {
			c := s.client(keyT)
			if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer please")}},
				option.WithHeader("x-mock-completion-tokens", "400")); err != nil {
				t.Fatal(err)
			}
			// Envoy sends the stream-done charge when it destroys the
			// stream, after the client has its answer: look for the
			// refusal a few times.
			refused := false
			for i := range 10 {
				time.Sleep(100 * time.Millisecond)
				_, err := s.chat(ctx, keyT, "gpt-4o-mini", "next "+strconv.Itoa(i))
				if statusOf(err) == http.StatusTooManyRequests {
					refused = true
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !refused {
				st, _ := s.envoyStats(ctx, "swarmgate_ratelimit.*(timeout|ShouldRateLimit|over_limit|error)")
				t.Fatalf("key T (tpm 300) not refused after a 400-token answer; Envoy: %s", st)
			}
		})

		// A minter sub-key's rpm counts the requests of the keys it minted
		// with its own: minting the minter and two keys under it (one
		// served request each) fills its 3, while each minted key has
		// used one of its own 3.
		t.Run("a minter's rpm bounds the keys it minted", func(t *testing.T) {
			create := func(k subkey.Key) (*subkey.Key, string) {
				t.Helper()
				made, plain, err := store.Create(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				eventually(ctx, t, "the new sub-key accepted", func() (bool, string) {
					status, code := s.chatRefusal(ctx, plain)
					return status != http.StatusUnauthorized, fmt.Sprint(status, code)
				})
				return made, plain
			}
			m, keyM := create(subkey.Key{Tenant: "team", Minter: true, Limits: config.Limits{RPM: 3}})
			// Each within its own 3, as the key API requires of a minted key.
			_, keyC1 := create(subkey.Key{Tenant: "team", Parent: m.ID, Limits: config.Limits{RPM: 3}})
			_, keyC2 := create(subkey.Key{Tenant: "team", Parent: m.ID, Limits: config.Limits{RPM: 3}})
			for name, key := range map[string]string{"a minted key": keyC1, "the other minted key": keyC2, "the minter": keyM} {
				_, err := s.chat(ctx, key, "gpt-4o-mini", "over the minter's minute")
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || !strings.Contains(apiErr.Message, m.ID) {
					t.Errorf("%s after the minter's 3 in a minute: %v, want 429 naming the minter %s", name, err, m.ID)
				}
			}
			// The tenant's other keys are not held by it.
			if _, err := s.chat(ctx, keyFree, "gpt-4o-mini", "free after the minter"); err != nil {
				t.Errorf("an unlimited sub-key of the tenant: %v", err)
			}
		})

		// The counters the service keeps are the limited sub-keys' only:
		// the config key and the sub-key without limits sent no sub-key
		// descriptor.
		t.Run("only limited sub-keys have counters", func(t *testing.T) {
			var keys []string
			iter := rdb.Scan(ctx, 0, "*subkey_*", 0).Iterator()
			for iter.Next(ctx) {
				if !strings.HasPrefix(iter.Val(), "sg:subkey:") {
					keys = append(keys, iter.Val())
				}
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			sort.Strings(keys)
			joined := strings.Join(keys, " ")
			for _, want := range []string{"subkey_" + a.ID + "_limit_rpm_", "subkey_" + b.ID + "_limit_rpm_", "subkey_" + tk.ID + "_limit_tpm_"} {
				if !strings.Contains(joined, want) {
					t.Errorf("no counter %s* in %v", want, keys)
				}
			}
			for _, not := range []string{"team-1", free.ID, "quota"} {
				if strings.Contains(joined, not) {
					t.Errorf("a counter names %q: %v", not, keys)
				}
			}
		})
		if !time.Now().Truncate(time.Minute).Equal(minute) {
			t.Fatalf("a minute boundary passed during the test (started in %v)", minute)
		}
	})
}

// avoidMinuteEdge waits for the next minute when less than need is left
// in this one: the service counts in fixed minutes.
func avoidMinuteEdge(t *testing.T, need time.Duration) {
	t.Helper()
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < need {
		time.Sleep(left + 100*time.Millisecond)
	}
}
