package extproc_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	adm "github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// tpmStack is a router-level ext_proc over gRPC with a real reserver and
// admission queue on one redis-server: tenant alpha may use 1000 tokens
// per window.
type tpmStack struct {
	*harness
	rdb   *redis.Client
	cfg   *config.Config
	queue *adm.Queue
}

func newTPMStack(t *testing.T, maxWait, window time.Duration) *tpmStack {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	cfg := testConfig(t)
	cfg.Accounting.TokenLimits = "reserve"
	cfg.Admission.MaxWait.Duration = maxWait
	alpha, _ := cfg.Tenant("alpha")
	alpha.Limits.TPM = 1000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	res := reserve.New(rdb, cfg, reserve.Options{Window: window, Logger: quiet})
	q := adm.New(adm.Options{Order: adm.NewRedisOrder(rdb, cfg.Redis.KeyPrefix), ReplicaID: "r1",
		StepTimeout: 5 * time.Second, Logger: quiet})
	h := newHarness(t, cfg, func(o *extproc.Options) {
		o.Reserver = wire.Reserver(res, func() *config.Config { return cfg })
		o.Queue = wire.Queue(q)
	})
	return &tpmStack{harness: h, rdb: rdb, cfg: cfg, queue: q}
}

// held is what alpha's tenant TPM window holds now, read from Redis.
func (s *tpmStack) held(t *testing.T) int64 {
	t.Helper()
	v, err := s.rdb.HGet(t.Context(), ledger.TenantKey(s.cfg.Redis.KeyPrefix, "alpha", "rv:tpm:tenant:h"), "_sum").Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// serve answers an admitted request with usage of total tokens.
func serve(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, usage string) {
	t.Helper()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", contract.HeaderBackend, "big", contract.HeaderUpstreamKey, "big-1"))
	roundTrip(t, st, respBody([]byte(`{"choices":[],"usage":`+usage+`}`), true))
}

const bigAsk = `{"model":"chat","max_tokens":900,"messages":[{"role":"user","content":"hi"}]}`

// TestReservationWaitsForTPMWindow: a request refused for the tenant's TPM
// waits in the queue (one override_message_timeout) until the settled
// usage leaves the window, is admitted, and settles its own usage.
func TestReservationWaitsForTPMWindow(t *testing.T) {
	s := newTPMStack(t, 5*time.Second, time.Second)
	first, cancel1 := admit(t, s.harness, bigAsk)
	defer cancel1()
	serve(t, first, `{"prompt_tokens":100,"completion_tokens":800,"total_tokens":900}`)
	if got := s.held(t); got != 900 {
		t.Fatalf("window holds %d after the first settle, want 900", got)
	}

	st, cancel := s.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
	start := time.Now()
	ov := roundTrip(t, st, reqBody(bigAsk))
	d := ov.GetOverrideMessageTimeout().AsDuration()
	if d <= 0 || d > 5*time.Second+s.cfg.Request.MessageTimeout.Duration {
		t.Fatalf("want one override_message_timeout within max_wait + message_timeout first, got %v", ov)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRequestBody() == nil {
		t.Fatalf("not admitted after the window freed: %v", resp)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("waited %v for a one-second window", waited)
	}
	serve(t, st, `{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}`)
	if got := s.held(t); got != 30 {
		t.Errorf("window holds %d after the waiting request settled, want its 30 tokens", got)
	}
	if n := s.queue.Waiting(); n != 0 {
		t.Errorf("%d still waiting", n)
	}
}

// TestReservationWaitRefusals: a refusal that cannot wait is the 429 it was
// before, at once, with its token headers; a client that leaves while
// waiting leaves the queue and holds nothing.
func TestReservationWaitRefusals(t *testing.T) {
	t.Run("retry after beyond max_wait", func(t *testing.T) {
		s := newTPMStack(t, 2*time.Second, time.Minute)
		first, cancel1 := admit(t, s.harness, bigAsk)
		defer cancel1()
		serve(t, first, `{"prompt_tokens":100,"completion_tokens":800,"total_tokens":900}`)
		st, cancel := s.stream(t, contract.RoleRouter)
		defer cancel()
		roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
		ir := roundTrip(t, st, reqBody(bigAsk)).GetImmediateResponse()
		set := setOf(t, ir.GetHeaders())
		if ir.GetStatus().GetCode() != 429 || set["retry-after"] != "60" || set["x-ratelimit-limit-tokens"] != "1000" || set["x-ratelimit-remaining-tokens"] != "100" {
			t.Fatalf("want an immediate 429 with Retry-After 60 and the token headers, got %v %v", ir.GetStatus(), set)
		}
	})
	t.Run("wait ends", func(t *testing.T) {
		// The first request's hold stays unsettled, so each retry is
		// refused again until the wait is over.
		s := newTPMStack(t, 1500*time.Millisecond, time.Second)
		_, cancel1 := admit(t, s.harness, bigAsk)
		defer cancel1()
		st, cancel := s.stream(t, contract.RoleRouter)
		defer cancel()
		roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
		if ov := roundTrip(t, st, reqBody(bigAsk)); ov.GetOverrideMessageTimeout() == nil {
			t.Fatalf("not waiting: %v", ov)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ir := resp.GetImmediateResponse()
		set := setOf(t, ir.GetHeaders())
		if ir.GetStatus().GetCode() != 429 || set["retry-after"] != "1" || set["x-ratelimit-limit-tokens"] != "1000" || set["x-ratelimit-reset-tokens"] == "" {
			t.Fatalf("want the reservation's 429 after the wait, got %v %v", ir.GetStatus(), set)
		}
		if n := s.queue.Waiting(); n != 0 {
			t.Errorf("%d waiting", n)
		}
	})
	t.Run("client leaves while waiting", func(t *testing.T) {
		s := newTPMStack(t, 5*time.Second, time.Second)
		first, cancel1 := admit(t, s.harness, bigAsk)
		defer cancel1()
		serve(t, first, `{"prompt_tokens":100,"completion_tokens":800,"total_tokens":900}`)
		st, cancel := s.stream(t, contract.RoleRouter)
		roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
		if ov := roundTrip(t, st, reqBody(bigAsk)); ov.GetOverrideMessageTimeout() == nil {
			t.Fatalf("not waiting: %v", ov)
		}
		cancel()
		deadline := time.Now().Add(time.Second)
		for s.queue.Waiting() != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := s.queue.Waiting(); n != 0 {
			t.Fatalf("%d still waiting a second after the client left", n)
		}
		keys, err := s.rdb.Keys(context.Background(), "*admission*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if n, _ := s.rdb.ZCard(context.Background(), k).Result(); n > 0 && k[len(k)-2:] == ":q" {
				t.Errorf("ticket left in %s", k)
			}
		}
		if got := s.held(t); got != 900 {
			t.Errorf("window holds %d, want only the first request's 900", got)
		}
	})
}

// TestReservationNewcomerQueuesBehindWaiter: a request that would fit in
// the tenant's TPM window while another waits for it does not take the
// window first: it waits in the queue too and is admitted after the
// waiter.
func TestReservationNewcomerQueuesBehindWaiter(t *testing.T) {
	s := newTPMStack(t, 5*time.Second, time.Second)
	first, cancel1 := admit(t, s.harness, bigAsk)
	defer cancel1()
	serve(t, first, `{"prompt_tokens":100,"completion_tokens":800,"total_tokens":900}`)

	waiter, cancelW := s.stream(t, contract.RoleRouter)
	defer cancelW()
	roundTrip(t, waiter, reqHeaders(false, chatHeaders(keyAlpha)...))
	if ov := roundTrip(t, waiter, reqBody(bigAsk)); ov.GetOverrideMessageTimeout() == nil {
		t.Fatalf("the big request is not waiting: %v", ov)
	}
	waiterAt := make(chan time.Time, 1)
	go func() {
		resp, err := waiter.Recv()
		if err != nil || resp.GetRequestBody() == nil {
			t.Errorf("waiter not admitted: %v %v", resp, err)
		}
		waiterAt <- time.Now()
	}()

	// 10 output tokens fit beside the 900 the window holds.
	newcomer, cancelN := s.stream(t, contract.RoleRouter)
	defer cancelN()
	roundTrip(t, newcomer, reqHeaders(false, chatHeaders(keyAlpha)...))
	small := `{"model":"chat","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	if ov := roundTrip(t, newcomer, reqBody(small)); ov.GetOverrideMessageTimeout() == nil {
		t.Fatalf("the newcomer took the window before the waiter: %v", ov)
	}
	resp, err := newcomer.Recv()
	if err != nil || resp.GetRequestBody() == nil {
		t.Fatalf("newcomer not admitted after the waiter: %v %v", resp, err)
	}
	newcomerAt := time.Now()
	select {
	case at := <-waiterAt:
		// Both are admitted once the window frees, in one queue step; the
		// two streams' answers then race to this test by microseconds.
		if at.After(newcomerAt.Add(100 * time.Millisecond)) {
			t.Errorf("newcomer admitted %v before the waiter", at.Sub(newcomerAt))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never admitted")
	}
}

// TestReservationWaiterLeaves: a waiter whose client leaves stops holding
// newcomers back at once: a request that fits beside what the window holds
// is admitted without waiting for the window the departed waiter wanted.
func TestReservationWaiterLeaves(t *testing.T) {
	s := newTPMStack(t, 10*time.Second, 5*time.Second)
	first, cancel1 := admit(t, s.harness, bigAsk)
	defer cancel1()
	serve(t, first, `{"prompt_tokens":100,"completion_tokens":800,"total_tokens":900}`)

	waiter, cancelW := s.stream(t, contract.RoleRouter)
	roundTrip(t, waiter, reqHeaders(false, chatHeaders(keyAlpha)...))
	if ov := roundTrip(t, waiter, reqBody(bigAsk)); ov.GetOverrideMessageTimeout() == nil {
		t.Fatalf("the big request is not waiting: %v", ov)
	}
	hash := ledger.TenantKey(s.cfg.Redis.KeyPrefix, "alpha", "rv:tpm:tenant:h")
	if n, _ := s.rdb.HGet(t.Context(), hash, "_waiters").Int(); n != 1 {
		t.Fatalf("%d waiters on the tenant's window, want 1", n)
	}
	cancelW()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := s.rdb.HExists(t.Context(), hash, "_waiters").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the departed waiter still counts on the tenant's window")
		}
		time.Sleep(10 * time.Millisecond)
	}

	newcomer, cancelN := s.stream(t, contract.RoleRouter)
	defer cancelN()
	roundTrip(t, newcomer, reqHeaders(false, chatHeaders(keyAlpha)...))
	small := `{"model":"chat","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	if resp := roundTrip(t, newcomer, reqBody(small)); resp.GetRequestBody() == nil {
		t.Fatalf("newcomer not admitted at once after the waiter left: %v", resp)
	}
}

// TestReservationNeverFits: a request that needs more than the tenant's
// whole TPM window is refused at once, queue on or off, without
// Retry-After and with x-should-retry: false. Before, with the queue on,
// its refusal (Retry-After 0) looked ready at once and the request asked
// the reserver again in a loop for its whole wait.
func TestReservationNeverFits(t *testing.T) {
	const tooBig = `{"model":"chat","max_tokens":1200,"messages":[{"role":"user","content":"hi"}]}`
	for _, maxWait := range []time.Duration{0, 2 * time.Second} {
		t.Run("max_wait "+maxWait.String(), func(t *testing.T) {
			s := newTPMStack(t, maxWait, time.Second)
			st, cancel := s.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
			// The first answer is the refusal, not the wait's
			// override_message_timeout.
			ir := roundTrip(t, st, reqBody(tooBig)).GetImmediateResponse()
			set := setOf(t, ir.GetHeaders())
			if ir.GetStatus().GetCode() != 429 || set["retry-after"] != "" || set["x-should-retry"] != "false" ||
				set["x-ratelimit-limit-tokens"] != "1000" || !strings.Contains(string(ir.GetBody()), "Request too large") {
				t.Fatalf("want a final 429, got %v %v %s", ir.GetStatus(), set, ir.GetBody())
			}
			if n := s.queue.Waiting(); n != 0 {
				t.Errorf("%d waiting", n)
			}
			if got := s.held(t); got != 0 {
				t.Errorf("window holds %d", got)
			}
		})
	}
}

// TestRateLimitModeNeverFits: with token_limits ratelimit, a request whose
// prompt estimate is more than a TPM limit's whole window is refused by
// ext_proc as "Request too large", final (x-should-retry: false): the
// rate-limit filter would refuse it every minute with a 429 the SDKs
// retry. A request that fits passes.
func TestRateLimitModeNeverFits(t *testing.T) {
	cfg := testConfig(t)
	cfg.Accounting.TokenLimits = "ratelimit"
	cfg.Tenants[0].Limits.TPM = 50
	h := newHarness(t, cfg)
	big := `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`
	st, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha)...))
	ir := roundTrip(t, st, reqBody(big)).GetImmediateResponse()
	set := setOf(t, ir.GetHeaders())
	if ir.GetStatus().GetCode() != 429 || set["retry-after"] != "" || set["x-should-retry"] != "false" ||
		set["x-ratelimit-limit-tokens"] != "50" || !strings.Contains(string(ir.GetBody()), "Request too large") {
		t.Fatalf("want a final 429, got %v %v %s", ir.GetStatus(), set, ir.GetBody())
	}
	st2, cancel2 := h.stream(t, contract.RoleRouter)
	defer cancel2()
	roundTrip(t, st2, reqHeaders(false, chatHeaders(keyAlpha)...))
	if resp := roundTrip(t, st2, reqBody(`{"model":"chat","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)); resp.GetRequestBody() == nil {
		t.Fatalf("a small prompt (its max output is charged at stream end) was not admitted: %v", resp)
	}
}
