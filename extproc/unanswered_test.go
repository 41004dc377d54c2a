package extproc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/metricstest"
)

// An attempt's stream that ends without response headers is an upstream
// reset or refusal, or the client going away (Envoy cancels the attempt
// with the request). Envoy closes the attempt's stream the same way in
// both; only in the second does the router-level stream end without
// response headers too. The key pool must count only the first.
func TestUnansweredAttempts(t *testing.T) {
	tests := []struct {
		name       string
		clientGone bool
		wantOpen   bool
		verdict    string
	}{
		{"client gone before the upstream answered", true, false, "cancelled"},
		{"upstream reset, Envoy answers 503", false, true, "reset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Breaker.Consecutive5xx = 2
			cfg.Breaker.ResetGrace = config.Duration{Duration: 50 * time.Millisecond}
			reg := prometheus.NewRegistry()
			pools, err := keypool.New(cfg, keypool.Options{Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, cfg, func(o *extproc.Options) { o.Keys = wire.Keys(pools) })
			const requests = 4 // two keys on "big", two unanswered attempts each
			for i := range requests {
				id := fmt.Sprint("swarm-", i)
				rt, cancelRouter := h.stream(t, contract.RoleRouter)
				roundTrip(t, rt, reqHeaders(false, chatHeaders(keyBeta, "x-request-id", id)...))
				admitted := roundTrip(t, rt, reqBody(`{"model":"agent","messages":[{"role":"user","content":"plan"}]}`))
				if admitted.GetRequestBody() == nil {
					t.Fatalf("not admitted: %v", admitted)
				}
				md := admitted.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
				up, cancelAttempt := h.stream(t, contract.RoleUpstream)
				// No session stickiness: the attempts spread over both keys.
				resp := roundTrip(t, up, upstreamReq(t, "big", "", 1, true, md, routedHeaders("x-request-id", id)...))
				if setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["authorization"] == "" {
					t.Fatal("attempt left without a key")
				}
				cancelAttempt() // the attempt ends: no response headers
				if tc.clientGone {
					cancelRouter() // and so does the request
					continue
				}
				roundTrip(t, rt, respHeaders(false, ":status", "503", "content-type", "text/plain"))
				roundTrip(t, rt, respBody([]byte("upstream connect error or disconnect/reset before headers"), true))
				cancelRouter()
			}
			waitCounter(t, reg, "swarmgate_keypool_unanswered_total", map[string]string{"backend": "big", "verdict": tc.verdict}, requests)
			open := 0
			for _, k := range pools.Snapshot() {
				if k.Backend == "big" && k.State == "open" {
					open++
				}
			}
			if tc.wantOpen != (open == 2) || !tc.wantOpen && open != 0 {
				t.Errorf("%d of 2 keys open, want open %v", open, tc.wantOpen)
			}
		})
	}
}

// waitCounter waits (bounded) until the counter with the labels reaches want.
func waitCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := metricstest.Sum(reg, name, labels)
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leavingPicker picks a key, then holds the answer until the attempt's
// stream is gone: the client left while the pick was finishing, after the
// key pool last looked at the context.
type leavingPicker struct {
	extproc.KeyPicker
	picked chan struct{}
}

func (p leavingPicker) Pick(ctx context.Context, backend string, req extproc.PickRequest) (extproc.Lease, error) {
	l, err := p.KeyPicker.Pick(ctx, backend, req)
	close(p.picked)
	<-ctx.Done()
	return l, err
}

// TestClientLeavesDuringPick: an attempt whose key was picked but whose
// answer cannot be sent (the stream is gone) is reported unanswered, like
// one whose stream ends later: its key's in-flight slot is free at once
// and the router-level stream's word decides whether it counts. Before,
// the failed send returned quietly and the slot stayed taken until the
// lease expired (10-20 min by default).
func TestClientLeavesDuringPick(t *testing.T) {
	for _, tc := range []struct {
		name       string
		clientGone bool
		verdict    string
	}{
		{"client gone", true, "cancelled"},
		{"stream lost, Envoy answers 503", false, "reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Breaker.ResetGrace = config.Duration{Duration: 50 * time.Millisecond}
			reg := prometheus.NewRegistry()
			pools, err := keypool.New(cfg, keypool.Options{Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			picker := leavingPicker{KeyPicker: wire.Keys(pools), picked: make(chan struct{})}
			h := newHarness(t, cfg, func(o *extproc.Options) { o.Keys = picker })
			rt, cancelRouter := h.stream(t, contract.RoleRouter)
			defer cancelRouter()
			roundTrip(t, rt, reqHeaders(false, chatHeaders(keyBeta, "x-request-id", "leaves")...))
			admitted := roundTrip(t, rt, reqBody(agentBody))
			md := admitted.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
			if md == nil {
				t.Fatalf("not admitted: %v", admitted)
			}
			up, cancelAttempt := h.stream(t, contract.RoleUpstream)
			if err := up.Send(upstreamReq(t, "big", "", 1, true, md, routedHeaders()...)); err != nil {
				t.Fatal(err)
			}
			<-picker.picked
			cancelAttempt()
			if tc.clientGone {
				cancelRouter()
			} else {
				roundTrip(t, rt, respHeaders(false, ":status", "503", "content-type", "text/plain"))
			}
			waitCounter(t, reg, "swarmgate_keypool_unanswered_total", map[string]string{"backend": "big", "verdict": tc.verdict}, 1)
			for _, k := range pools.Snapshot() {
				if k.InFlight != 0 {
					t.Errorf("key %s/%s: %d in flight after its attempt's stream went away", k.Backend, k.KeyID, k.InFlight)
				}
			}
		})
	}
}

// An attempt whose body cannot be translated for its backend (only a
// config change between the router's check and the attempt gets there)
// ends at ext_proc with a local error: nothing reached the provider. Its
// key's slot is given back at once, and the key is not charged the
// attempt's unanswered end (a reset to its breaker).
func TestUntranslatableAttemptFreesItsKey(t *testing.T) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pools, err := keypool.New(cfg, keypool.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, func(o *extproc.Options) { o.Keys = wire.Keys(pools) })
	headers := []string{":method", "POST", ":path", "/v1/messages", ":authority", "gw", "authorization", "Bearer " + keyAlpha,
		"x-request-id", "req-1", "anthropic-version", "2023-06-01", "content-type", "application/json"}
	rst, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, rst, reqHeaders(false, headers...))
	resp := roundTrip(t, rst, reqBody(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	md := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
	if md == nil {
		t.Fatalf("not admitted: %v", resp)
	}
	// A retry on the chat relay, its body one the Messages-to-chat
	// translator refuses (an assistant prefill).
	st, cancelAttempt := h.stream(t, contract.RoleUpstream)
	roundTrip(t, st, upstreamReq(t, "relay", "m", 2, false, md, headers...))
	resp = roundTrip(t, st, reqBody(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}]}`))
	if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 400 {
		t.Fatalf("untranslatable attempt: %v, want a local 400", resp)
	}
	for _, k := range pools.Snapshot() {
		if k.Backend == "relay" && k.InFlight != 0 {
			t.Errorf("key %s: %d in flight after its attempt ended at ext_proc", k.KeyID, k.InFlight)
		}
	}
	cancelAttempt()
	cancel()
	time.Sleep(300 * time.Millisecond) // past the unanswered verdict's grace
	if n, err := metricstest.Sum(reg, "swarmgate_keypool_unanswered_total", map[string]string{"backend": "relay"}); err != nil || n != 0 {
		t.Errorf("unanswered attempts on relay: %v (%v); want none", n, err)
	}
}
