package e2eenvoy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/mockupstream"
)

// attempt is one HTTP attempt the SDK made, as its middleware saw it.
type attempt struct {
	at         time.Duration // since the call started
	status     int
	retryAfter string
	requestID  string
}

// attempts records every attempt of an SDK call; after runs once, after
// the first attempt's answer.
type attempts struct {
	mu    sync.Mutex
	start time.Time
	list  []attempt
	after func()
}

func (a *attempts) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	a.mu.Lock()
	defer a.mu.Unlock()
	if res != nil {
		a.list = append(a.list, attempt{at: time.Since(a.start), status: res.StatusCode,
			retryAfter: res.Header.Get("Retry-After"), requestID: res.Header.Get("X-Request-Id")})
	}
	if len(a.list) == 1 && a.after != nil {
		a.after()
	}
	return res, err
}

func (a *attempts) snapshot() []attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]attempt(nil), a.list...)
}

// TestSDKRetriesThroughAProviderRetryAfter: the provider answers every key
// of the model's only relay with 429 and Retry-After: 10. openai-go with
// its default retries (2 retries; it honours Retry-After, capping one wait
// at 8 s, requestconfig.DefaultMaxServerDelay in v3.63.0) must succeed: the
// gateway's refusals while the keys rest say how long is really left (the
// provider's 10 s, its breaker's jitter and the EDS settle, counted down),
// so the SDK's second retry lands after the keys reopen. Before, each
// refusal said Retry-After: 1 and the SDK gave up after about two seconds.
// The provider's value is 10 s, above the SDK's 8 s cap: the cap only makes
// the SDK ask once more in between, and that answer's Retry-After covers
// the rest.
//
// The breaker is the default one (consecutive_429: 3), where one 429 with
// Retry-After rests the key for exactly the provider's time. The harness's
// consecutive_429: 1 trips the breaker instead, for max(cooldown 30 s,
// Retry-After) plus jitter: the refusals then truthfully say 30-36 s, more
// than default retries wait.
func TestSDKRetriesThroughAProviderRetryAfter(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startSwarmgateWith(t, func(s *stack, p Ports) string {
			yml := gatewayYAML(map[string]string{"xds": p.XDS, "extproc": p.ExtProc, "ratelimit": p.RateLimit, "admin": p.Admin},
				p.EnvoyPort, p.Redis, s.relayA.Addr().String(), s.relayB.Addr().String())
			return strings.Replace(yml, "consecutive_429: 1\n", "consecutive_429: 3\n", 1)
		})
		startEnvoy(t, r.Path, s.bootstrapPath)
		s.waitRouted(t)
		ctx := testCtx(t)
		const providerWait = 10 * time.Second
		s.relayA.SetDefaultBehavior(mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: providerWait})

		rec := &attempts{start: time.Now(), after: func() {
			// The provider's window ends; nothing reaches it before the
			// keys reopen anyway.
			s.relayA.SetDefaultBehavior(mockupstream.Behavior{})
		}}
		c := openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(keyTeam),
			option.WithMiddleware(rec.middleware))
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "solo",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("worth the wait")},
		})
		list := rec.snapshot()
		for i, a := range list {
			t.Logf("attempt %d at %s: %d Retry-After %q x-request-id %q", i+1, a.at.Round(time.Millisecond), a.status, a.retryAfter, a.requestID)
		}
		if err != nil {
			t.Fatalf("the SDK with default retries gave up: %v", err)
		}
		if len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" {
			t.Fatalf("empty completion: %+v", resp)
		}
		if len(list) < 2 || list[0].status != http.StatusTooManyRequests {
			t.Fatalf("attempts %+v: want a 429 first", list)
		}
		first, _ := strconv.Atoi(list[0].retryAfter)
		if first < int(providerWait/time.Second) {
			t.Errorf("first refusal Retry-After %q, want at least the provider's %s", list[0].retryAfter, providerWait)
		}
		last := list[len(list)-1]
		if last.status != http.StatusOK || last.at < providerWait {
			t.Errorf("last attempt %+v: want 200 after the provider's %s", last, providerWait)
		}
		for _, a := range list[:len(list)-1] {
			if a.status != http.StatusTooManyRequests {
				t.Errorf("attempt %+v: want 429 while the keys rest", a)
			}
			// Every refusal covers the time left until the keys reopen.
			if ra, _ := strconv.Atoi(a.retryAfter); time.Duration(ra)*time.Second < providerWait-a.at {
				t.Errorf("attempt at %s said Retry-After %q with %s of the provider's wait left", a.at, a.retryAfter, providerWait-a.at)
			}
		}
	})
}
