package e2eenvoy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// adminToken is the admin listener's token in the sub-key run test.
const adminToken = "admin-token-for-the-e2e-run-0123456789"

// subkeysRunConfig: sub-keys on, the key API behind the admin token, one
// relay with two keys, a priced model.
const subkeysRunConfig = `
admin:
  token: env:SG_ADMIN_TOKEN
subkeys:
  enabled: true
accounting:
  token_limits: reserve
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    auth: bearer
    keys:
      - {id: pa-1, secret: env:P_A1}
      - {id: pa-2, secret: env:P_A2}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, price: {input_per_mtok: 1000, output_per_mtok: 2000}}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// Run shape: a planner's minter key mints runWorkers sub-keys for one run,
// and the run's budget (the minter's, period "run") is what stops it.
const (
	runLabel   = "nightly-42"
	runWorkers = 500
	runBudget  = 10.0 // dollars: a few hundred requests at the prices above
	runClients = 40   // workers calling at once
)

// TestPromiseSubkeysRun is the sub-key run end to end: the admin mints a
// planner's minter key with the run's budget; the planner mints 500
// sub-keys for its workers through the key API; the workers run through
// Envoy on them; one is revoked mid-run and every replica refuses it within
// 1 s; the run's budget stops the run at its cap without overshoot; and
// `swarmgate usage --label run=…` reports exactly what the provider counted.
func TestPromiseSubkeysRun(t *testing.T) {
	bin := buildSwarmgate(t)
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		// Three replicas of one deployment, each a whole gateway behind its
		// own Envoy, on one Redis and the same providers.
		s := startPStack(t, r, pstackOptions{body: subkeysRunConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1", "pa-2": "P_A2"}}}})
		replicas := []*pstack{s,
			startPStack(t, r, pstackOptions{body: subkeysRunConfig, replicaOf: s}),
			startPStack(t, r, pstackOptions{body: subkeysRunConfig, replicaOf: s})}
		ctx := testCtx(t)
		api := keyAPI{base: s.adminURL}

		var planner created
		if status, body := api.call(ctx, http.MethodPost, "/v1/keys", adminToken, map[string]any{
			"tenant": "team", "minter": true, "labels": map[string]string{"run": runLabel, "agent": "planner"},
			"budget": map[string]any{"amount": runBudget, "period": "run", "hard_cap": true},
		}, &planner); status != http.StatusCreated && status != http.StatusOK {
			t.Fatalf("admin minting the planner's key: %d %s", status, body)
		}

		workers := mintWorkers(t, ctx, api, planner.APIKey)
		run := &runResult{}
		runSwarm(t, ctx, run, replicas, workers, func(served int64) bool { return served == 100 }, func() {
			// The planner revokes through another replica's admin listener;
			// the probes served before a replica hears of it are the run's too.
			revokeMidRun(t, ctx, keyAPI{base: replicas[1].adminURL}, planner.APIKey, workers[0], replicas, &run.served)
		})
		t.Logf("run: %d served, %d refused by the budget, %d other", run.served.Load(), run.budget.Load(), run.other.Load())
		if run.budget.Load() == 0 {
			t.Fatal("the run's budget never stopped it")
		}
		if n := run.other.Load(); n > 0 {
			t.Errorf("%d requests failed other than by the budget or the revocation: %v", n, run.firstOther.Load())
		}

		counted := relayCost(s.relays["relay-a"])
		if counted > runBudget {
			t.Errorf("the provider served %.6f, over the run's cap %.2f", counted, runBudget)
		}
		if counted < runBudget*0.9 {
			t.Errorf("the run stopped at %.6f, well short of its cap %.2f", counted, runBudget)
		}
		// The ledger writes after each answer: poll until the run's count
		// settles, then it must match the provider exactly.
		prompt, completion := relayTokens(s.relays["relay-a"])
		var report labelCounters
		eventually(ctx, t, "the run's bill", func() (bool, string) {
			report = usageByLabel(t, ctx, bin, s).AllTime
			return report.Requests == run.served.Load(), fmt.Sprintf("%+v, %d served", report, run.served.Load())
		})
		if report.InputTokens != prompt || report.OutputTokens != completion {
			t.Errorf("swarmgate usage --label run=%s: %d input + %d output tokens, the provider counted %d + %d",
				runLabel, report.InputTokens, report.OutputTokens, prompt, completion)
		}
		if cost, err := strconv.ParseFloat(report.Cost, 64); err != nil || math.Abs(cost-counted) > 1e-9 {
			t.Errorf("swarmgate usage: cost %s, the provider's tokens at the config's prices %.9f", report.Cost, counted)
		}

		// The admin revokes the planner's minter: the keys it minted go
		// with it, on every replica, though none of them was revoked itself.
		if status, body := api.call(ctx, http.MethodPost, "/v1/keys/"+planner.Key.ID+"/revoke", adminToken, nil, nil); status != http.StatusOK {
			t.Fatalf("admin revoking the planner's minter: %d %s", status, body)
		}
		refusedEverywhere(t, ctx, workers[len(workers)-1], replicas, time.Now(), new(atomic.Int64))
	})
}

// keyAPI calls the admin listener's key API.
type keyAPI struct{ base string }

// created is the key API's answer to a creation.
type created struct {
	APIKey string `json:"api_key"`
	Key    struct {
		ID string `json:"id"`
	} `json:"key"`
}

func (a keyAPI) call(ctx context.Context, method, path, token string, body any, out any) (int, string) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err.Error()
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, fmt.Sprintf("%v: %s", err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// mintWorkers has the planner mint one sub-key per worker, labelled with
// the run, 16 at a time.
func mintWorkers(t *testing.T, ctx context.Context, api keyAPI, minter string) []created {
	t.Helper()
	out := make([]created, runWorkers)
	var wg sync.WaitGroup
	errs := make(chan string, runWorkers)
	sem := make(chan struct{}, 16)
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			status, body := api.call(ctx, http.MethodPost, "/v1/keys", minter, map[string]any{
				"labels": map[string]string{"run": runLabel, "agent": "worker-" + strconv.Itoa(i)},
			}, &out[i])
			if status != http.StatusCreated && status != http.StatusOK {
				errs <- fmt.Sprintf("worker %d: %d %s", i, status, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	return out
}

// runResult counts the run's requests by outcome.
type runResult struct {
	served, budget, revoked, other atomic.Int64
	firstOther                     atomic.Value
}

// runSwarm has runClients goroutines call through the replicas' Envoys on
// the workers' keys, both round robin, until the budget refuses them; at
// the served count mid says, it calls during (once).
func runSwarm(t *testing.T, ctx context.Context, res *runResult, replicas []*pstack, workers []created, mid func(int64) bool, during func()) {
	t.Helper()
	var next atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range runClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := int(next.Add(1))
				w := workers[n%len(workers)]
				c := replicas[n%len(replicas)].client(w.APIKey)
				_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(8),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("work for the run")}},
					option.WithMaxRetries(0))
				var apiErr *openai.Error
				switch {
				case err == nil:
					if mid(res.served.Add(1)) {
						once.Do(during)
					}
				case errors.As(err, &apiErr) && apiErr.Code == "key_revoked":
					res.revoked.Add(1)
				case errors.As(err, &apiErr) && isBudgetRefusal(apiErr):
					res.budget.Add(1)
					if res.budget.Load() >= 2*runClients {
						return
					}
				default:
					res.other.Add(1)
					res.firstOther.CompareAndSwap(nil, fmt.Sprint(err))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// isBudgetRefusal: the run's (the minter's) budget refused the call.
func isBudgetRefusal(e *openai.Error) bool {
	return e.StatusCode == http.StatusTooManyRequests && strings.Contains(e.Code, "budget")
}

// revokeMidRun: the planner revokes one worker's key; every replica's
// Envoy refuses it with key_revoked within 1 s.
func revokeMidRun(t *testing.T, ctx context.Context, api keyAPI, minter string, w created, replicas []*pstack, served *atomic.Int64) {
	if status, body := api.call(ctx, http.MethodPost, "/v1/keys/"+w.Key.ID+"/revoke", minter, nil, nil); status != http.StatusOK {
		t.Errorf("planner revoking %s: %d %s", w.Key.ID, status, body)
		return
	}
	refusedEverywhere(t, ctx, w, replicas, time.Now(), served)
}

// refusedEverywhere: every replica's Envoy refuses w's key with 401
// key_revoked within 1 s of revoked; served counts what it still served.
func refusedEverywhere(t *testing.T, ctx context.Context, w created, replicas []*pstack, revoked time.Time, served *atomic.Int64) {
	t.Helper()
	for i, rp := range replicas {
		for {
			status, code := rp.chatRefusal(ctx, w.APIKey)
			if status == 0 && code == "<nil>" {
				served.Add(1)
			}
			if status == http.StatusUnauthorized && code == "key_revoked" {
				t.Logf("replica %d: key_revoked %v after the revocation", i+1, time.Since(revoked))
				break
			}
			if time.Since(revoked) > time.Second {
				t.Errorf("replica %d: %d %q 1s after the revocation, want 401 key_revoked", i+1, status, code)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// relayTokens sums the tokens of the requests the relay served.
func relayTokens(r *relay) (prompt, completion int64) {
	for _, rec := range r.Requests() {
		if rec.Outcome == "ok" {
			prompt += int64(rec.PromptTokens)
			completion += int64(rec.CompletionTokens)
		}
	}
	return prompt, completion
}

// relayCost prices what the relay served at the config's prices.
func relayCost(r *relay) float64 {
	p, c := relayTokens(r)
	return float64(p)*1000/1e6 + float64(c)*2000/1e6
}

// labelReport is the part of `swarmgate usage --label … --json` the test
// reads: the label's all-time counters (a run's whole bill).
type labelReport struct {
	AllTime labelCounters `json:"all_time"`
}

type labelCounters struct {
	Requests     int64  `json:"requests"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Cost         string `json:"cost"`
}

// usageByLabel runs `swarmgate usage --label run=<run>` against the
// stack's Redis and config.
func usageByLabel(t *testing.T, ctx context.Context, bin string, s *pstack) labelReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "usage", "--config", s.cfgPath, "--label", "run="+runLabel, "--json")
	cmd.Env = append(os.Environ(), "SG_ADMIN_TOKEN="+adminToken, "P_A1="+relaySecrets["P_A1"], "P_A2="+relaySecrets["P_A2"])
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("swarmgate usage: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("swarmgate usage: %v", err)
	}
	var rep labelReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("swarmgate usage output: %v\n%s", err, out)
	}
	return rep
}

// buildSwarmgate builds the command once for the test.
func buildSwarmgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "swarmgate")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/swarmgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}
