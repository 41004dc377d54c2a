package extproc_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// Envoy's "no healthy upstream" 503 for a pool whose every key rests on the
// provider's Retry-After becomes the keys' 429, whose Retry-After is the
// time left (7 s and the EDS settle), not 1 s; admission then refuses the
// next request with the same figure.
func TestRetryAfterOfARestingPool(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, agentBody) // "agent" is served by "big" only
	defer cancel()
	rest := keypool.ParseOutcome(429, func(n string) string {
		if n == "retry-after" {
			return "7"
		}
		return ""
	})
	for _, k := range []string{"big-1", "big-2"} {
		_ = h.pool.Report(t.Context(), "big", k, "", rest)
	}
	resp := roundTrip(t, st, respHeaders(false, ":status", "503", "content-type", "text/plain"))
	status, hs := immediate(t, resp)
	if status != http.StatusTooManyRequests || !secondsLeft(hs["retry-after"], 8) || hs["x-request-id"] == "" {
		t.Fatalf("replaced answer %d %v, want 429 with Retry-After 8 and the request id", status, hs)
	}

	st2, cancel2 := h.stream(t, contract.RoleRouter)
	defer cancel2()
	roundTrip(t, st2, reqHeaders(false, chatHeaders(keyAlpha)...))
	status, hs = immediate(t, roundTrip(t, st2, reqBody(agentBody)))
	if status != http.StatusTooManyRequests || !secondsLeft(hs["retry-after"], 8) {
		t.Fatalf("admission refusal %d %v, want 429 with Retry-After 8", status, hs)
	}
}

// secondsLeft reports whether a Retry-After counts down from want: want
// itself, or a second less on a slow run (the wait is rounded up from
// what is left when the answer is built).
func secondsLeft(v string, want int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && (n == want || n == want-1)
}

// queueAnswer refuses after a wait, with the figure the queue measured
// when the wait began.
type queueAnswer struct{ res extproc.QueueResult }

func (q queueAnswer) Admit(context.Context, extproc.QueueRequest, func() (bool, time.Duration, extproc.Rate)) extproc.QueueResult {
	return q.res
}

// keysThenRoom reports every key out at admission, with room after.
type keysThenRoom struct {
	extproc.KeyPicker
	asked atomic.Int32
}

func (k *keysThenRoom) Available([]string) (bool, time.Duration) {
	if k.asked.Add(1) == 1 {
		return false, 2500 * time.Millisecond
	}
	return true, 0
}
func (k *keysThenRoom) Failing([]string) bool { return false }

// A request that waited in the admission queue and is refused at the end
// of its wait is told the later of the queue's figure (its place in line
// counted at the deadline) and the keys' time left now, not what was left
// when it began to wait.
func TestQueueTimeoutRetryAfterIsFresh(t *testing.T) {
	cfg := testConfig(t)
	cfg.Admission.MaxWait = config.Duration{Duration: 5 * time.Second}
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		keys  extproc.KeyPicker
		queue time.Duration
		retry string
	}{
		{"keys out longer than the line", keysAnswer{wire.Keys(pools), 2500 * time.Millisecond, false}, time.Second, "3"},
		{"line longer than the keys are out", keysAnswer{wire.Keys(pools), 2500 * time.Millisecond, false}, 9 * time.Second, "9"},
		// The keys have room (others were ahead, or the pace): the
		// queue's own figure stands.
		{"keys have room", &keysThenRoom{KeyPicker: wire.Keys(pools)}, 9 * time.Second, "9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := queueAnswer{extproc.QueueResult{Reason: "timeout", Waited: 5 * time.Second, RetryAfter: tc.queue}}
			srv, err := extproc.New(extproc.Options{Config: cfg, Keys: tc.keys, Usage: wire.Usage(), Queue: q})
			if err != nil {
				t.Fatal(err)
			}
			x := srv.NewRouterExchange()
			defer x.End()
			ctx := context.Background()
			x.Handle(ctx, reqHeaders(false, chatHeaders(keyAlpha)...))
			ir := x.Handle(ctx, reqBody(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)).GetImmediateResponse()
			if set := setOf(t, ir.GetHeaders()); ir.GetStatus().GetCode() != http.StatusTooManyRequests || set["retry-after"] != tc.retry {
				t.Fatalf("%v retry-after %q, want 429 and %s: %s", ir.GetStatus(), set["retry-after"], tc.retry, ir.GetBody())
			}
		})
	}
}
