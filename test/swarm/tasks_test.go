package swarm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// taskPlan is what each agent does: perAgent tasks, one chat completion
// each, thinking between them; a refused task either fails at once or,
// with retry, is tried again with exponential back-off honouring
// Retry-After until maxWait has passed since its first try.
type taskPlan struct {
	agents, perAgent int
	think            func(agent, task int) time.Duration
	retry            bool
	maxWait          time.Duration
	bound            time.Duration // the whole run
	// keys: agent a presents keys[a%len(keys)] (tenant by tenant).
	keys []string
	// open: agents keep starting tasks (up to perAgent) until the bound;
	// the result counts the tasks started, not perAgent per agent.
	open bool
}

// taskResult is what the agents saw. Latencies are per task (first try to
// answer, retries included); call is the slowest single call.
type taskResult struct {
	name                          string
	tasks, ok, rl, s5xx, other, u int // u: not answered within the run's bound
	calls                         int
	lat                           []time.Duration
	slowestCall                   time.Duration
	slowestRefusal                time.Duration
	wall                          time.Duration
	errs                          map[string]int
	rlCodes                       map[string]int // final 429s by error code
	done                          []taskDone     // completed tasks in completion order
	mu                            sync.Mutex
}

// taskDone is one completed task.
type taskDone struct {
	key        string
	start, end time.Time
}

func (r *taskResult) completion() float64 { return float64(r.ok) / float64(max(r.tasks, 1)) }

func (r *taskResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(int(math.Ceil(p*float64(len(r.lat))))-1, len(r.lat)-1)]
}

func (r *taskResult) row() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %s | %d | %d (%.1f %%) | %d | %s | %s | %s | %d | %d | %d | %d | %s | %.1f s |", r.name, r.tasks, r.ok,
		100*r.completion(), r.calls, ms(r.pct(0.50)), ms(r.pct(0.95)), ms(r.pct(0.99)), r.rl, r.s5xx, r.other, r.u,
		ms(r.slowestCall), r.wall.Seconds())
}

const taskHeader = "| variant | tasks | completed | client calls | p50 ms | p95 ms | p99 ms | 429 (final) | 5xx | other | unanswered | slowest call ms | wall |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// runTasks runs the agents (openai-go SDK, no SDK retries, every third
// call streamed) through baseURL.
func runTasks(t *testing.T, name, baseURL string, pl taskPlan) *taskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pl.bound)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * pl.agents, MaxIdleConnsPerHost: 2 * pl.agents, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	clients := map[string]openai.Client{}
	for _, k := range pl.keys {
		clients[k] = sdkClient(baseURL, k, hc)
	}
	res := &taskResult{name: name, tasks: pl.agents * pl.perAgent, errs: map[string]int{}, rlCodes: map[string]int{}}
	if pl.open {
		res.tasks = 0
	}
	var wg sync.WaitGroup
	start := time.Now()
	for a := range pl.agents {
		key := pl.keys[a%len(pl.keys)]
		client := clients[key]
		rng := rand.New(rand.NewPCG(uint64(a), 7))
		wg.Go(func() {
			for j := range pl.perAgent {
				if pl.open {
					if ctx.Err() != nil {
						return
					}
					res.count(func() { res.tasks++ })
				}
				res.task(ctx, client, key, a, j, pl, rng)
				if d := pl.think(a, j); d > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(d):
					}
				}
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	slices.Sort(res.lat)
	slices.SortFunc(res.done, func(x, y taskDone) int { return x.end.Compare(y.end) })
	return res
}

// task runs one task to its end: served, refused (after retries, if any)
// or cut by the run's bound.
func (r *taskResult) task(ctx context.Context, client openai.Client, key string, a, j int, pl taskPlan, rng *rand.Rand) {
	t0 := time.Now()
	p := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are agent " + strconv.Itoa(a) + " of a swarm."), openai.UserMessage("Task " + strconv.Itoa(j) + ".")}}
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			r.count(func() { r.u++ })
			return
		}
		c0 := time.Now()
		err := call(ctx, client, p, (a+j)%3 == 0)
		took := time.Since(c0)
		var apiErr *openai.Error
		isAPI := errors.As(err, &apiErr)
		r.count(func() {
			r.calls++
			r.slowestCall = max(r.slowestCall, took)
			if err != nil && isAPI && apiErr.StatusCode == http.StatusTooManyRequests {
				r.slowestRefusal = max(r.slowestRefusal, took)
			}
		})
		switch {
		case err == nil:
			end := time.Now()
			r.count(func() {
				r.ok++
				r.lat = append(r.lat, end.Sub(t0))
				r.done = append(r.done, taskDone{key: key, start: t0, end: end})
			})
			return
		case isAPI && apiErr.StatusCode == http.StatusTooManyRequests:
			if pl.retry {
				wait := backoff(attempt, rng)
				if ra := retryAfter(apiErr); ra > wait {
					wait = ra
				}
				if time.Since(t0)+wait < pl.maxWait {
					select {
					case <-ctx.Done():
					case <-time.After(wait):
					}
					continue
				}
			}
			r.count(func() { r.rl++; r.rlCodes[apiErr.Code]++ })
		case ctx.Err() != nil:
			r.count(func() { r.u++ })
		case isAPI && apiErr.StatusCode >= 500:
			r.count(func() { r.s5xx++; r.errs[fmt.Sprintf("%d %s", apiErr.StatusCode, apiErr.Code)]++ })
		default:
			r.count(func() {
				r.other++
				if isAPI {
					r.errs[fmt.Sprintf("%d %s", apiErr.StatusCode, apiErr.Code)]++
				} else {
					r.errs[err.Error()]++
				}
			})
		}
		return
	}
}

func (r *taskResult) count(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

func call(ctx context.Context, client openai.Client, p openai.ChatCompletionNewParams, stream bool) error {
	if stream {
		s := client.Chat.Completions.NewStreaming(ctx, p)
		chunks := 0
		for s.Next() {
			chunks++
		}
		err := s.Err()
		_ = s.Close()
		if err == nil && chunks == 0 {
			err = errors.New("empty stream")
		}
		return err
	}
	c, err := client.Chat.Completions.New(ctx, p)
	if err == nil && len(c.Choices) == 0 {
		err = errors.New("no choices")
	}
	return err
}

// backoff is the usual client policy: 0.5 s doubling, capped at 8 s,
// with equal jitter.
func backoff(attempt int, rng *rand.Rand) time.Duration {
	d := min(500*time.Millisecond<<attempt, 8*time.Second)
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

// retryAfter reads the refusal's Retry-After (seconds), 0 when absent.
func retryAfter(e *openai.Error) time.Duration {
	if e.Response == nil {
		return 0
	}
	s, err := strconv.ParseFloat(e.Response.Header.Get("Retry-After"), 64)
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
