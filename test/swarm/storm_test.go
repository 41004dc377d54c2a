package swarm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// The storm (issue 27): a swarm shaped like our users', far beyond what
// its providers can serve. Each agent's task is a chain of five calls
// within a deadline: a planner, three workers at once, a critic. Planner
// and critic ask one model served by a single key; workers ask another
// served by a pool of relays. Every key states its limit the OpenAI way
// for a sliding window (x-ratelimit-limit-requests: the window's figure,
// x-ratelimit-reset-requests: its end), and one worker key refuses half
// of what it would serve with 429 Retry-After: 1. Clients are the official
// openai-go SDK with its default retries (2, honouring Retry-After).

const (
	plannerModel = "planner"
	workerModel  = "worker"
)

// stormScale is one storm. Limits are per window, per key.
type stormScale struct {
	agents, tasks int
	window        time.Duration
	planner       int     // the planner model's single key
	workers       [][]int // per worker relay, its keys; the last key of the last relay refuses half
	think         time.Duration
	deadline      time.Duration // one task's chain
	maxWait       time.Duration // admission.max_wait of the queue variant
	span          time.Duration // admission.session_span of the sessions variant
	bound         time.Duration // the whole run
}

func stormFor() stormScale {
	if fullSwarm() {
		// Planner key 60 per 10 s: 3 tasks/s (planner + critic); workers
		// 30+25, 20+15 per 10 s: 9 calls/s, 3 tasks/s too, so every key
		// is needed. An agent alone runs a task in about 0.5 s and thinks
		// 3.5 s: 12 agents ask ~3 tasks/s.
		return stormScale{agents: 500, tasks: 4, window: 10 * time.Second, planner: 60, workers: [][]int{{30, 25}, {20, 15}},
			think: 3500 * time.Millisecond, deadline: 30 * time.Second, maxWait: 10 * time.Second, span: 4 * time.Second, bound: 4 * time.Minute}
	}
	// make test (-race, 2 shared cores): the same shape in 2 s windows,
	// 30 agents against keys for about 3.
	return stormScale{agents: 30, tasks: 2, window: 2 * time.Second, planner: 6, workers: [][]int{{4, 3}, {2, 2}},
		think: 300 * time.Millisecond, deadline: 8 * time.Second, maxWait: 3 * time.Second, span: 2 * time.Second, bound: 40 * time.Second}
}

// completionTokens is what the relays answer per call (stack relays).
const completionTokens = 8

func workerRelay(i int) string { return fmt.Sprintf("relay-%c", 'a'+i) }

// flakyKey is the worker key that refuses half its requests.
func (sc stormScale) flakyKey() (relay, key string) {
	r := len(sc.workers) - 1
	return workerRelay(r), relayKeyID(workerRelay(r), len(sc.workers[r])-1)
}

// spec: the planner relay (one key) and the worker relays, two ext_proc
// replicas on envoysim, the ledger on. breaker and admission are the YAML
// bodies of the variant.
func (sc stormScale) spec(breaker, admission string) stackSpec {
	sp := stackSpec{
		relays:   []relaySpec{{name: "planner", keys: 1, ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond}},
		replicas: 2, routerOn: []int{0, 1}, upstreamOn: []int{0, 1},
		breaker: breaker, numRetries: 3, admission: admission, accounting: true,
		models: []modelSpec{{name: plannerModel, relays: []string{"planner"}}, {name: workerModel}},
	}
	for i, keys := range sc.workers {
		sp.relays = append(sp.relays, relaySpec{name: workerRelay(i), keys: len(keys), ttft: 20 * time.Millisecond, perToken: 2 * time.Millisecond})
		sp.models[1].relays = append(sp.models[1].relays, workerRelay(i))
	}
	return sp
}

// limit sets every key's sliding window on the started stack.
func (sc stormScale) limit(s *stack) {
	s.relay("planner").SetBehavior(relayKeyID("planner", 0), mockupstream.Behavior{Sliding: &mockupstream.SlidingWindow{Limit: sc.planner, Window: sc.window}})
	fr, fk := sc.flakyKey()
	for i, keys := range sc.workers {
		for j, n := range keys {
			sw := &mockupstream.SlidingWindow{Limit: n, Window: sc.window}
			if id := relayKeyID(workerRelay(i), j); workerRelay(i) == fr && id == fk {
				sw.RefuseShare, sw.RefuseRetryAfter = 0.5, time.Second
			}
			s.relay(workerRelay(i)).SetBehavior(relayKeyID(workerRelay(i), j), mockupstream.Behavior{Sliding: sw})
		}
	}
}

// stormResult is what the agents saw.
type stormResult struct {
	name                    string
	tasks, started, ok      int
	failedAt                map[string]int // first failing stage of tasks that failed
	calls, callsOK          int
	final429, s5xx, other   int
	deadline                int // calls cut by their task's deadline
	errs                    map[string]int
	lat                     []time.Duration // completed tasks
	start, end              time.Time
	slowestTask             time.Duration
	mu                      sync.Mutex
	keyRows                 []string
	ceiling, up429Share     float64
	plannerBusy, workerBusy time.Duration
	upRequests, up429       int
	minKeyShare             float64 // lowest served / window allowance over the keys
	ledgerCell, waitCell    string
}

func (r *stormResult) add(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

// runStorm runs the agents through baseURL.
func runStorm(t *testing.T, name, baseURL string, sc stormScale) *stormResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sc.bound)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * sc.agents, MaxIdleConnsPerHost: 2 * sc.agents, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	// The SDK's defaults: two retries on 408/409/429/5xx and connection
	// errors, honouring Retry-After.
	client := openai.NewClient(option.WithBaseURL(baseURL+"/v1/"), option.WithAPIKey(agentKey), option.WithHTTPClient(hc))
	r := &stormResult{name: name, tasks: sc.agents * sc.tasks, failedAt: map[string]int{}, errs: map[string]int{}, start: time.Now()}
	var wg sync.WaitGroup
	for a := range sc.agents {
		wg.Go(func() {
			for j := range sc.tasks {
				if ctx.Err() != nil {
					return
				}
				r.task(ctx, client, a, j, sc)
				select {
				case <-ctx.Done():
				case <-time.After(sc.think + time.Duration((a*37+j*61)%100)*sc.think/200):
				}
			}
		})
	}
	wg.Wait()
	r.end = time.Now()
	slices.Sort(r.lat)
	return r
}

// task runs one chain: planner, three workers at once, critic, each call
// with the SDK's retries, all within the deadline. The session is the
// chain (x-session-id).
func (r *stormResult) task(ctx context.Context, client openai.Client, a, j int, sc stormScale) {
	t0 := time.Now()
	tctx, cancel := context.WithTimeout(ctx, sc.deadline)
	defer cancel()
	sess := option.WithHeader("x-session-id", fmt.Sprintf("agent-%d-task-%d", a, j))
	r.add(func() { r.started++ })
	if !r.call(tctx, client, plannerModel, "Plan task "+fmt.Sprint(j)+" of agent "+fmt.Sprint(a)+".", sess) {
		r.add(func() { r.failedAt["planner"]++ })
		return
	}
	var ok [3]bool
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() { ok[w] = r.call(tctx, client, workerModel, fmt.Sprintf("Do step %d of task %d.", w, j), sess) })
	}
	wg.Wait()
	if !ok[0] || !ok[1] || !ok[2] {
		r.add(func() { r.failedAt["worker"]++ })
		return
	}
	if !r.call(tctx, client, plannerModel, "Review task "+fmt.Sprint(j)+".", sess) {
		r.add(func() { r.failedAt["critic"]++ })
		return
	}
	d := time.Since(t0)
	r.add(func() { r.ok++; r.lat = append(r.lat, d); r.slowestTask = max(r.slowestTask, d) })
}

// call makes one chat completion (the SDK retrying as it does) and
// classifies its end.
func (r *stormResult) call(ctx context.Context, client openai.Client, m, prompt string, opts ...option.RequestOption) bool {
	c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: m,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}, opts...)
	if err == nil && len(c.Choices) == 0 {
		err = errors.New("no choices")
	}
	var apiErr *openai.Error
	r.add(func() {
		r.calls++
		switch {
		case err == nil:
			r.callsOK++
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests:
			r.final429++
		case errors.As(err, &apiErr) && apiErr.StatusCode >= 500:
			r.s5xx++
			r.errs[fmt.Sprintf("%d %s", apiErr.StatusCode, apiErr.Code)]++
		case ctx.Err() != nil:
			r.deadline++
		default:
			r.other++
			r.errs[err.Error()]++
		}
	})
	return err == nil
}

func (r *stormResult) p95() time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(int(math.Ceil(0.95*float64(len(r.lat))))-1, len(r.lat)-1)]
}

// account fills the upstream side: per key, what it served against what
// its window allows from the run's start to the model's last answer; the tasks the windows
// allow (planner and critic take two of the planner key's, workers three
// of the pool's); upstream 429s outside the half-refusing key's own; the
// ledger against the relays' usage.
func (r *stormResult) account(t *testing.T, s *stack, sc stormScale) {
	t.Helper()
	fr, fk := sc.flakyKey()
	// A model's keys could serve from the run's start until its last
	// answer: after it the swarm no longer asked (its agents were done).
	served := func(relays ...string) time.Duration {
		var last time.Time
		for _, name := range relays {
			for _, rec := range s.relay(name).Requests() {
				if rec.Status == http.StatusOK {
					last = maxTime(last, rec.Time)
				}
			}
		}
		return max(last.Sub(r.start), 0)
	}
	var workers []string
	for i := range sc.workers {
		workers = append(workers, workerRelay(i))
	}
	r.plannerBusy, r.workerBusy = served("planner"), served(workers...)
	r.minKeyShare = math.Inf(1)
	row := func(relay string, j, limit int, d time.Duration) float64 {
		id := relayKeyID(relay, j)
		c := s.relay(relay).Count(id)
		allowed := float64(limit) * d.Seconds() / sc.window.Seconds()
		share := float64(c.OK) / max(allowed, 1)
		r.minKeyShare = min(r.minKeyShare, share)
		r.upRequests += c.Requests
		if relay != fr || id != fk {
			r.up429 += c.RateLimited
		}
		note := ""
		if relay == fr && id == fk {
			note = " (refuses half)"
		}
		// When the 429s came: in the first window (before the key's limit
		// and window are known) or after, per 10 % of the run.
		// And when it served, per 10 % of the run against the window's
		// allowance in that tenth (where a share below the pace is lost).
		early, spread, okSpread := 0, make([]int, 10), make([]int, 10)
		for _, rec := range s.relay(relay).Requests() {
			if rec.KeyID != id {
				continue
			}
			at := rec.Time.Sub(r.start)
			tenth := min(max(int(10*at/max(d, 1)), 0), 9)
			if rec.Status == http.StatusOK {
				okSpread[tenth]++
			}
			if rec.Status != http.StatusTooManyRequests {
				continue
			}
			if at < sc.window {
				early++
			}
			spread[tenth]++
		}
		r.keyRows = append(r.keyRows, fmt.Sprintf("%s%s: %d per %s, served %d of %.0f (%.0f %%; per tenth of the run %v of %.0f), %d requests, %d answered 429 (%d in the first window; per tenth of the run %v)",
			id, note, limit, sc.window, c.OK, allowed, 100*share, okSpread, allowed/10, c.Requests, c.RateLimited, early, spread))
		return allowed
	}
	plannerAllowed := row("planner", 0, sc.planner, r.plannerBusy)
	workerAllowed := 0.0
	for i, keys := range sc.workers {
		for j, n := range keys {
			workerAllowed += row(workerRelay(i), j, n, r.workerBusy)
		}
	}
	r.ceiling = min(plannerAllowed/2, workerAllowed/3)
	r.up429Share = float64(r.up429) / float64(max(r.upRequests, 1))

	// The ledger equals the relays' 200s exactly when no call was cut;
	// a call its client's deadline cut after admission is billed partial
	// (accounting.bill_on_disconnect: the provider's usage if it reached
	// the gateway, else what was delivered, the prompt estimate at least),
	// whether or not the provider had answered it.
	n, u, cost := relaysUsage(s.relays, s.cfg)
	var got ledger.Report
	exact := waitFor(30*time.Second, func() bool {
		var err error
		got, err = s.ledger.Query(context.Background(), "swarm", ledger.MonthOf(time.Now()))
		tot := got.Total
		if err != nil || tot.Partial == 0 {
			return err == nil && tot.Requests == int64(n) && tot.InputTokens == u.PromptTokens && tot.OutputTokens == u.CompletionTokens && tot.Cost == cost
		}
		return tot.Requests-tot.Partial <= int64(n) && int64(n) <= tot.Requests && tot.OutputTokens <= u.CompletionTokens &&
			u.CompletionTokens-tot.OutputTokens <= tot.Partial*int64(completionTokens)
	})
	tot := got.Total
	r.ledgerCell = fmt.Sprintf("%d req, %d/%d tok, %s", tot.Requests, tot.InputTokens, tot.OutputTokens, tot.Cost)
	switch {
	case !exact:
		t.Errorf("%s: ledger %+v, relays' usage %d requests, %d in / %d out tokens, cost %s", r.name, tot, n, u.PromptTokens, u.CompletionTokens, cost)
	case tot.Partial == 0:
		r.ledgerCell += " = relays"
	default:
		r.ledgerCell += fmt.Sprintf(" = relays' %d 200s, %d of them and %d more cut by deadlines billed partial", n,
			int64(n)-(tot.Requests-tot.Partial), tot.Requests-int64(n))
	}
	r.waitCell = "—"
	if len(s.queues) > 0 {
		p95, k := s.waits.waitPct(0.95)
		r.waitCell = fmt.Sprintf("%s (%d admitted)", p95.Round(time.Millisecond), k)
	}
	relayOK := 0
	for _, m := range s.relays {
		relayOK += m.Total().OK
	}
	// A relay's 200 that did not reach the client is a call its task's
	// deadline cut after the answer left the relay.
	if relayOK < r.callsOK || relayOK > r.callsOK+r.deadline {
		t.Errorf("%s: relays answered %d with 200, clients got %d (and %d calls were cut by deadlines)", r.name, relayOK, r.callsOK, r.deadline)
	}
	if un := s.relay("planner").Total().Unauthorized; un > 0 {
		t.Errorf("%s: %d requests reached the planner relay without a valid key", r.name, un)
	}
}

const stormHeader = "| variant | tasks | started | completed | of what the windows allow | failed at planner / workers / critic | client calls (ok) | final 429 | client 5xx | cut by deadline | upstream requests | upstream 429 (not the refusing key) | lowest key share of its window | p95 queue wait | p95 task | wall | ledger |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

func (r *stormResult) row() string {
	return fmt.Sprintf("| %s | %d | %d | %d (%.1f %%) | %.0f (%.0f %%) | %d / %d / %d | %d (%d) | %d | %d | %d | %d | %d (%.2f %%) | %.0f %% | %s | %s | %.0f s | %s |",
		r.name, r.tasks, r.started, r.ok, 100*float64(r.ok)/float64(max(r.tasks, 1)), r.ceiling, 100*float64(r.ok)/max(r.ceiling, 1),
		r.failedAt["planner"], r.failedAt["worker"], r.failedAt["critic"], r.calls, r.callsOK, r.final429, r.s5xx, r.deadline,
		r.upRequests, r.up429, 100*r.up429Share, 100*r.minKeyShare, r.waitCell, r.p95().Round(time.Millisecond), r.end.Sub(r.start).Seconds(), r.ledgerCell)
}

// TestSwarmStorm runs the storm with the default config (queue and pace
// on), with both off, with the queue's own max_wait and with sessions
// bounded, reports the figures of
// docs/admission.md and asserts what must hold on any machine: every task
// ends by the bound, no client sees a 5xx or anything but a success, a
// 429 or its deadline, no request reaches a provider without a valid key,
// and the ledger equals the relays' usage exactly. SWARMGATE_SWARM_FULL=1
// runs the 500-agent storm.
func TestSwarmStorm(t *testing.T) {
	sc := stormFor()
	variants := []struct{ name, breaker, admission string }{
		{"default config (queue and pace on)", "  jitter: 0.2", ""},
		{"off: queue and pace (max_wait 0, pace false)", "  jitter: 0.2", "  max_wait: 0\n  pace: false"},
		{fmt.Sprintf("queue (max_wait %s, pace)", sc.maxWait), "  jitter: 0.2", fmt.Sprintf("  max_wait: %s\n  pace: true", sc.maxWait)},
		{fmt.Sprintf("sessions (max_wait %s, pace, session_span %s)", sc.maxWait, sc.span), "  jitter: 0.2",
			fmt.Sprintf("  max_wait: %s\n  pace: true\n  session_span: %s", sc.maxWait, sc.span)},
		{"capacity: the default plus capacity_weights", "  jitter: 0.2", "  capacity_weights: true"},
	}
	var rows []string
	for _, v := range variants {
		t.Run(strings.Fields(v.name)[0], func(t *testing.T) {
			s := startStack(t, sc.spec(v.breaker, v.admission))
			sc.limit(s)
			r := runStorm(t, v.name, s.sim.URL(), sc)
			r.account(t, s, sc)
			t.Logf("%s: per key\n  %s", v.name, strings.Join(r.keyRows, "\n  "))
			t.Logf("%s: errors %v; the planner served for %s, the workers for %s", v.name, r.errs, r.plannerBusy.Round(time.Second), r.workerBusy.Round(time.Second))
			pw, po := paceWaitsBy(t, s.regs)
			t.Logf("%s: picks that waited for a key's pace or answer %v, went on without a slot %v (per backend); admission order errors %.0f",
				v.name, pw, po, counterSum(t, s, "swarmgate_admission_order_errors_total"))
			var ws []string
			cur := map[string]string{} // relay -> weight, as updates arrive
			for _, u := range s.eds.weights() {
				for _, x := range u {
					if zw, ok := strings.CutPrefix(x, "pool_"+workerModel+"/"); ok {
						z, w, _ := strings.Cut(zw, "=")
						cur[z] = w
					}
				}
				var w []string
				for _, z := range slices.Sorted(maps.Keys(cur)) {
					w = append(w, z+"="+cur[z])
				}
				if len(w) > 0 && (len(ws) == 0 || ws[len(ws)-1] != strings.Join(w, " ")) {
					ws = append(ws, strings.Join(w, " "))
				}
			}
			t.Logf("%s: the worker relays' EDS weights, in turn: %s", v.name, strings.Join(ws, " → "))
			if strings.Contains(v.admission, "capacity_weights: true") && len(ws) < 2 {
				t.Errorf("%s: the worker relays' weights never followed the keys' capacity: %v", v.name, ws)
			}
			rows = append(rows, r.row())
			if r.s5xx > 0 || r.other > 0 {
				t.Errorf("%s: clients saw %d 5xx and %d other errors: %v", v.name, r.s5xx, r.other, r.errs)
			}
			if r.end.Sub(r.start) >= sc.bound {
				t.Errorf("%s: the run did not end within its bound %s", v.name, sc.bound)
			}
			if r.slowestTask > sc.deadline+2*time.Second {
				t.Errorf("%s: a task completed in %s, beyond its deadline %s", v.name, r.slowestTask, sc.deadline)
			}
		})
	}
	t.Logf("%d agents × %d tasks of 5 calls, deadline %s; planner key %d per %s; worker keys %v per %s, one refusing half\n%s\n%s",
		sc.agents, sc.tasks, sc.deadline, sc.planner, sc.window, sc.workers, sc.window, stormHeader, strings.Join(rows, "\n"))
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
