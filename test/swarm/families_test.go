package swarm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// The three API families an agent swarm speaks. Every agent uses its
// family's official SDK; the relays speak chat completions only, so the
// Responses and Messages agents are translated (docs/families.md).
var swarmFamilies = []string{"chat", "responses", "messages"}

// familyOutcome is what one family's agents saw.
type familyOutcome struct {
	ok, budget, other int
	errs              map[string]int
}

// familyRun is a swarm of agents of every family on one tenant key.
type familyRun struct {
	mu  sync.Mutex
	out map[string]*familyOutcome
}

func (r *familyRun) add(fam string, f func(o *familyOutcome)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.out[fam]
	if o == nil {
		o = &familyOutcome{errs: map[string]int{}}
		r.out[fam] = o
	}
	f(o)
}

// runFamilies runs perFamily agents of each family, tasks each, every
// third call streamed, on key. A budget refusal counts only when it is in
// the family's own shape: OpenAI's 429 budget_exceeded, Anthropic's 402
// billing_error.
func runFamilies(t *testing.T, s *stack, key string, perFamily, tasks int, bound time.Duration) *familyRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * perFamily, MaxIdleConnsPerHost: 4 * perFamily, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	oc := sdkClient(s.sim.URL(), key, hc)
	ac := anthropic.NewClient(aoption.WithBaseURL(s.sim.URL()), aoption.WithHeader("x-api-key", key), aoption.WithHTTPClient(hc),
		aoption.WithMaxRetries(0), aoption.WithRequestTimeout(25*time.Second))
	run := &familyRun{out: map[string]*familyOutcome{}}
	var wg sync.WaitGroup
	for fi, fam := range swarmFamilies {
		for a := range perFamily {
			wg.Go(func() {
				for j := range tasks {
					if ctx.Err() != nil {
						return
					}
					prompt := "Agent " + strconv.Itoa(a) + " of the " + fam + " team, task " + strconv.Itoa(j) + "."
					stream := (a+j+fi)%3 == 0
					var err error
					switch fam {
					case "chat":
						err = chatTask(ctx, oc, prompt, stream)
					case "responses":
						err = responsesTask(ctx, oc, prompt, stream)
					default:
						err = messagesTask(ctx, ac, prompt, stream)
					}
					run.add(fam, func(o *familyOutcome) { classify(o, err) })
					time.Sleep(agentThink(a, j) / 4)
				}
			})
		}
	}
	wg.Wait()
	return run
}

func classify(o *familyOutcome, err error) {
	var oe *openai.Error
	var ae *anthropic.Error
	switch {
	case err == nil:
		o.ok++
	case errors.As(err, &oe) && oe.StatusCode == http.StatusTooManyRequests && oe.Code == "budget_exceeded":
		o.budget++
	case errors.As(err, &ae) && ae.StatusCode == http.StatusPaymentRequired && string(ae.Type()) == "billing_error":
		o.budget++
	case errors.As(err, &oe):
		o.other++
		o.errs[fmt.Sprintf("%d %s", oe.StatusCode, oe.Code)]++
	case errors.As(err, &ae):
		o.other++
		o.errs[fmt.Sprintf("%d %s", ae.StatusCode, ae.Type())]++
	default:
		o.other++
		o.errs[err.Error()]++
	}
}

const taskMaxTokens = 16

func chatTask(ctx context.Context, c openai.Client, prompt string, stream bool) error {
	p := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(taskMaxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	return call(ctx, c, p, stream)
}

func responsesTask(ctx context.Context, c openai.Client, prompt string, stream bool) error {
	p := responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(taskMaxTokens),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}}
	if !stream {
		r, err := c.Responses.New(ctx, p)
		if err == nil && r.OutputText() == "" {
			err = errors.New("responses: no output text")
		}
		return err
	}
	s := c.Responses.NewStreaming(ctx, p)
	defer s.Close()
	completed := false
	for s.Next() {
		if s.Current().Type == "response.completed" {
			completed = true
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	if !completed {
		return errors.New("responses stream: no response.completed")
	}
	return nil
}

func messagesTask(ctx context.Context, c anthropic.Client, prompt string, stream bool) error {
	p := anthropic.MessageNewParams{Model: model, MaxTokens: taskMaxTokens,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
	if !stream {
		m, err := c.Messages.New(ctx, p)
		if err == nil && (len(m.Content) == 0 || m.Content[0].Text == "") {
			err = errors.New("messages: no text")
		}
		return err
	}
	s := c.Messages.NewStreaming(ctx, p)
	defer s.Close()
	var acc anthropic.Message
	for s.Next() {
		if err := acc.Accumulate(s.Current()); err != nil {
			return err
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	if acc.StopReason == "" || acc.Usage.OutputTokens == 0 {
		return errors.New("messages stream: no stop reason or usage")
	}
	return nil
}

// relayUsage sums what the relays answered 200, priced like the ledger.
func relayUsage(s *stack) (requests int, u pricing.Usage, cost pricing.Money) {
	return relaysUsage(s.relays, s.cfg)
}

// relaysUsage is relayUsage over any set of relays, priced at cfg's first
// target's price (every target of these stacks has the same).
func relaysUsage(relays map[string]*mockupstream.Server, cfg *config.Config) (requests int, u pricing.Usage, cost pricing.Money) {
	rate := pricing.RateOf(cfg.Models[0].Targets[0].Price)
	for _, m := range relays {
		for _, r := range m.Requests() {
			if r.Status != http.StatusOK {
				continue
			}
			one := pricing.Usage{PromptTokens: int64(r.PromptTokens), CompletionTokens: int64(r.CompletionTokens),
				CachedTokens: int64(r.CachedTokens), ReasoningTokens: int64(r.ReasoningTokens)}
			requests++
			u.PromptTokens += one.PromptTokens
			u.CompletionTokens += one.CompletionTokens
			cost += rate.Cost(one)
		}
	}
	return requests, u, cost
}

func familiesSpec(tenants []tenantSpec) stackSpec {
	return stackSpec{
		relays: []relaySpec{
			{name: "relay-a", keys: 3, ttft: 10 * time.Millisecond, perToken: time.Millisecond,
				mock: mockupstream.Behavior{FailProbability: 0.05, FailAction: mockupstream.ActError, Status: 503}},
			{name: "relay-b", keys: 2, ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond},
		},
		replicas: 2, routerOn: []int{0, 1}, upstreamOn: []int{0, 1},
		breaker:    "  consecutive_5xx: 5\n  cooldown: 1s",
		numRetries: 2,
		tenants:    tenants,
		accounting: true,
	}
}

func (r *familyRun) table() string {
	var b strings.Builder
	b.WriteString("| family | completed | budget refusals (own shape) | other |\n| --- | --- | --- | --- |\n")
	fams := append([]string(nil), swarmFamilies...)
	sort.Strings(fams)
	for _, f := range fams {
		o := r.out[f]
		if o == nil {
			o = &familyOutcome{}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d %v |\n", f, o.ok, o.budget, o.other, o.errs)
	}
	return b.String()
}

// TestSwarmFamilies: agents of all three families (openai-go chat and
// Responses, anthropic-sdk-go Messages) share one chat-completions key
// pool and one tenant: every family completes its tasks through the same
// keys (one flaky), and the tenant's ledger equals the usage the relays
// reported, exactly, whatever family each request spoke. Then a second
// tenant's hard-capped budget runs out under the same mixed swarm: every
// family is refused in its own shape, and spend never passes the cap.
func TestSwarmFamilies(t *testing.T) {
	perFamily, tasks := 12, 3
	if fullSwarm() {
		perFamily, tasks = 100, 4
	}
	const capped = "sk-swarm-capped"
	// One task costs about 30 prompt + 8 completion tokens at 1000/2000
	// per MTok ≈ 0.046; its hold (prompt estimate + 16) ≈ 0.062.
	budgetCap := 0.05 * float64(perFamily*len(swarmFamilies)*tasks) / 3
	s := startStack(t, familiesSpec([]tenantSpec{{name: "swarm", key: agentKey}, {name: "capped", key: capped, budget: budgetCap}}))
	ctx := context.Background()

	run := runFamilies(t, s, agentKey, perFamily, tasks, 60*time.Second)
	t.Logf("%d agents per family × %d tasks, one tenant:\n%s", perFamily, tasks, run.table())
	total := perFamily * tasks
	for _, f := range swarmFamilies {
		o := run.out[f]
		if o == nil || float64(o.ok) < 0.99*float64(total) {
			t.Errorf("%s: completed %+v of %d", f, o, total)
		}
	}
	n, u, cost := relayUsage(s)
	waitUntil(t, "the ledger equal to the relays' usage", 10*time.Second, func() bool {
		r, err := s.ledger.Query(ctx, "swarm", ledger.MonthOf(time.Now()))
		return err == nil && r.Total.Requests == int64(n) && r.Total.InputTokens == u.PromptTokens &&
			r.Total.OutputTokens == u.CompletionTokens && r.Total.Cost == cost
	})
	r, _ := s.ledger.Query(ctx, "swarm", ledger.MonthOf(time.Now()))
	t.Logf("ledger: %d requests, %d in / %d out tokens, cost %s = relays' usage", r.Total.Requests, r.Total.InputTokens, r.Total.OutputTokens, r.Total.Cost)

	run = runFamilies(t, s, capped, perFamily, tasks, 60*time.Second)
	t.Logf("same swarm on a tenant with a hard-capped budget of %.3f:\n%s", budgetCap, run.table())
	for _, f := range swarmFamilies {
		if o := run.out[f]; o == nil || o.budget == 0 || o.other > 0 {
			t.Errorf("%s on the capped tenant: %+v (want budget refusals in its own shape, nothing else)", f, o)
		}
	}
	rc, err := s.ledger.Query(ctx, "capped", ledger.MonthOf(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if spent := rc.Total.Cost.Float(); spent > budgetCap || spent < budgetCap/2 {
		t.Errorf("capped tenant spent %.4f of %.4f", spent, budgetCap)
	}
	n2, _, cost2 := relayUsage(s)
	waitUntil(t, "both ledgers equal to the relays' usage", 10*time.Second, func() bool {
		rc, err := s.ledger.Query(ctx, "capped", ledger.MonthOf(time.Now()))
		return err == nil && int64(n2-n) == rc.Total.Requests && cost2-cost == rc.Total.Cost
	})
}
