package e2eenvoy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/gatewaytest"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/internal/redistest"
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
		for _, a := range list {
			if !strings.HasPrefix(a.requestID, "sg-") {
				t.Errorf("attempt %+v without the gateway's request id", a)
			}
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

// TestAnswersCarryTheRequestIDAndTheAlias: through the real Envoy, every
// answer carries the gateway's request id (x-request-id in the OpenAI
// shape, request-id in Anthropic's), refusals and translated answers
// included, and the access log and the ledger find the request by it; the
// answers name the alias the client asked for ("gpt-relay"), not the
// relay's model ("relay-model"), which stays in the log and the ledger.
func TestAnswersCarryTheRequestIDAndTheAlias(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s, logs := startLoggedStack(t, r)
		ctx := testCtx(t)
		c := openai.NewClient(option.WithBaseURL(s.envoyURL+"/v1/"), option.WithAPIKey(keyTeam), option.WithMaxRetries(0))

		// Answered, JSON.
		var hr *http.Response
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-relay",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("name yourself")}}, option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		answered := hr.Header.Get("X-Request-Id")
		if !strings.HasPrefix(answered, "sg-") || resp.Model != "gpt-relay" {
			t.Errorf("answer: x-request-id %q, model %q; want the gateway's id and the alias", answered, resp.Model)
		}

		// Answered, streamed: every chunk names the alias.
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-relay",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream")}}, option.WithResponseInto(&hr))
		chunks := 0
		for stream.Next() {
			chunks++
			if m := stream.Current().Model; m != "gpt-relay" {
				t.Errorf("chunk %d names %q", chunks, m)
			}
		}
		if err := stream.Err(); err != nil || chunks == 0 {
			t.Fatalf("stream: %d chunks, %v", chunks, err)
		}
		if id := hr.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "sg-") || id == answered {
			t.Errorf("stream x-request-id %q", id)
		}

		// Anthropic Messages translated onto the chat relay, JSON and SSE.
		for _, streamed := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":"gpt-relay","max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, streamed)
			status, h, b := post(ctx, t, s.envoyURL+"/v1/messages", keyTeam, body)
			if status != http.StatusOK || !strings.HasPrefix(h.Get("Request-Id"), "sg-") || h.Get("X-Request-Id") != "" {
				t.Errorf("messages (stream %t): %d request-id %q x-request-id %q: %s", streamed, status, h.Get("Request-Id"), h.Get("X-Request-Id"), b)
			}
			if !strings.Contains(b, `"model":"gpt-relay"`) || strings.Contains(b, "relay-model") {
				t.Errorf("messages (stream %t) names another model: %s", streamed, b)
			}
		}

		// Refused by ext_proc: the id is there too, in each shape.
		status, h, b := post(ctx, t, s.envoyURL+"/v1/chat/completions", "sk-not-a-tenant", `{"model":"gpt-relay","messages":[]}`)
		refused := h.Get("X-Request-Id")
		if status != http.StatusUnauthorized || !strings.HasPrefix(refused, "sg-") {
			t.Errorf("refusal: %d x-request-id %q: %s", status, refused, b)
		}
		status, h, b = post(ctx, t, s.envoyURL+"/v1/messages", "sk-not-a-tenant", `{"model":"gpt-relay","max_tokens":5,"messages":[]}`)
		if status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("Request-Id"), "sg-") {
			t.Errorf("Anthropic refusal: %d request-id %q: %s", status, h.Get("Request-Id"), b)
		}

		// The ledger finds the answered request by its id.
		var entry struct {
			RequestID     string `json:"request_id"`
			Tenant        string `json:"tenant"`
			Model         string `json:"model"`
			UpstreamModel string `json:"upstream_model"`
			Backend       string `json:"backend"`
			Status        int    `json:"status"`
		}
		eventually(ctx, t, "the ledger entry", func() (bool, string) {
			status, body, err := get(ctx, s.adminURL+"/usage?request_id="+answered, "")
			if err != nil || status != http.StatusOK {
				return false, fmt.Sprintf("%d %s %v", status, body, err)
			}
			return json.Unmarshal([]byte(body), &entry) == nil, body
		})
		if entry.RequestID != answered || entry.Tenant != "team" || entry.Model != "gpt-relay" || entry.UpstreamModel != "relay-model" ||
			entry.Backend != "relay-c" || entry.Status != 200 {
			t.Errorf("ledger entry %+v", entry)
		}
		// The access log has one line for each, the relay's model with the
		// answered one.
		eventually(ctx, t, "the access log lines", func() (bool, string) {
			a, f := logs.line(answered), logs.line(refused)
			return a != nil && f != nil, logs.String()
		})
		if l := logs.line(answered); l["upstream_model"] != "relay-model" || l["model"] != "gpt-relay" || l["status"] != 200.0 {
			t.Errorf("access log of the answer: %v", l)
		}
		if l := logs.line(refused); l["status"] != 401.0 {
			t.Errorf("access log of the refusal: %v", l)
		}
	})
}

func post(ctx context.Context, t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// accessLines collects the gateway's JSON log lines.
type accessLines struct{ logbuf.Buffer }

// line is the access-log line of a request id (nil: none yet).
func (a *accessLines) line(id string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(a.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "request" && m["request_id"] == id {
			return m
		}
	}
	return nil
}

// startLoggedStack is startStack on a config with one more relay, relay-c,
// whose target is asked for "relay-model" under the alias "gpt-relay",
// and the gateway's log (access lines included) kept as JSON.
func startLoggedStack(t *testing.T, r envoytest.Release) (*stack, *accessLines) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	s := &stack{}
	s.relayA = startRelay(t, ctx, config.AuthBearer, map[string]string{"relay-a-1": "E2E_A1", "relay-a-2": "E2E_A2"})
	s.relayB = startRelay(t, ctx, config.AuthXAPIKey, map[string]string{"relay-b-1": "E2E_B1"})
	relayC := mockupstream.New(mockupstream.Options{Auth: config.AuthBearer, CompletionTokens: 3, Models: []string{"relay-model"},
		Keys: []mockupstream.Key{{ID: "relay-c-1", Value: upstreamKeys["E2E_A1"]}}})
	if _, err := relayC.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relayC.Close() })

	lisXDS, lisExtProc, lisAdmin := listen(t), listen(t), listen(t)
	rlsAddr, _ := freeAddr(t)
	_, envoyPort := freeAddr(t)
	envoyAdmin, _ := freeAddr(t)
	yml := gatewayYAML(map[string]string{"xds": lisXDS.Addr().String(), "extproc": lisExtProc.Addr().String(),
		"ratelimit": rlsAddr, "admin": lisAdmin.Addr().String()}, envoyPort, rs.Addr, s.relayA.Addr().String(), s.relayB.Addr().String())
	yml = strings.Replace(yml, "models:\n", `  - name: relay-c
    base_url: http://`+relayC.Addr().String()+`/v1
    auth: bearer
    keys:
      - {id: relay-c-1, secret: env:E2E_A1}
models:
  - name: gpt-relay
    targets:
      - {backend: relay-c, model: relay-model}
`, 1)
	yml += "telemetry:\n  access_log: true\n"
	cfg, err := config.Parse([]byte(yml), "e2e-envoy.yaml", config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := upstreamKeys[k]
		return v, ok
	}})
	if err != nil {
		t.Fatalf("%v\n%s", err, yml)
	}
	s.cfg = cfg
	logs := &accessLines{}
	// Registered before the gateway's own cleanup, so it runs after the
	// gateway stopped (cleanups run last first).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	gatewaytest.Start(t, gateway.Options{
		Roles: gateway.All, Initial: cfg, NodeID: "e2e-envoy", Version: "e2e",
		Logger:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Listeners: gateway.Listeners{XDS: lisXDS, ExtProc: lisExtProc, Admin: lisAdmin},
	})
	s.adminURL = "http://" + lisAdmin.Addr().String()
	s.bootstrapPath = gatewaytest.WriteBootstrap(t, cfg, "e2e-envoy-1", envoyAdmin)
	s.envoyAdmin = "http://" + envoyAdmin
	s.envoyURL = fmt.Sprintf("http://127.0.0.1:%d", envoyPort)
	startEnvoy(t, r.Path, s.bootstrapPath)
	s.waitRouted(t)
	return s, logs
}
