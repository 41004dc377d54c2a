package extproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// fakeAffinity is a ResponseAffinity in memory; id "resp_err" fails like
// an unreachable Redis.
type fakeAffinity struct {
	mu     sync.Mutex
	owners map[string]extproc.ResponseOwner
}

func (f *fakeAffinity) Remember(id string, o extproc.ResponseOwner, _ time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owners[id] = o
}

func (f *fakeAffinity) Owner(_ context.Context, id string) (extproc.ResponseOwner, error) {
	if id == "resp_err" {
		return extproc.ResponseOwner{}, errors.New("redis: i/o timeout")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.owners[id]
	if !ok {
		return o, extproc.ErrUnknownResponse
	}
	return o, nil
}

// responsesConfig is the test config with both backends serving the
// Responses API.
func responsesConfig(t *testing.T) *config.Config {
	t.Helper()
	y := strings.Replace(testYAML(), "    auth: api-key\n", "    auth: api-key\n    families: [chat_completions, responses]\n", 1)
	y = strings.Replace(y, "    auth: bearer\n", "    auth: bearer\n    families: [chat_completions, responses]\n", 1)
	cfg, err := config.Parse([]byte(y), "t.yaml", config.Options{LookupEnv: func(string) (string, bool) { return "s", true }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPreviousResponseRouting(t *testing.T) {
	aff := &fakeAffinity{owners: map[string]extproc.ResponseOwner{
		"resp_big":   {Backend: "big", KeyID: "big-2", Tenant: "alpha"},
		"resp_gone":  {Backend: "removed", KeyID: "x-1", Tenant: "alpha"},
		"resp_other": {Backend: "big", KeyID: "big-2", Tenant: "beta"},
	}}
	h := newHarness(t, responsesConfig(t), func(o *extproc.Options) { o.Affinity = aff })
	plain := newHarness(t, responsesConfig(t))
	for _, tc := range []struct {
		name, id string
		h        *harness
		status   int // 0: admitted
		code     string
		pool     string
	}{
		{"known: that backend's cluster only", "resp_big", h, 0, "", contract.Pool{Alias: "chat", Backend: "big"}.Cluster()},
		{"unknown id", "resp_never", h, 400, "previous_response_not_found", ""},
		{"another tenant's response: as if unknown", "resp_other", h, 400, "previous_response_not_found", ""},
		{"not an id", "resp with space", h, 400, "previous_response_not_found", ""},
		{"store down: refused, not guessed", "resp_err", h, 503, "affinity_unavailable", ""},
		{"owner no longer serves the model", "resp_gone", h, 409, "previous_response_unavailable", ""},
		{"no affinity configured", "resp_big", plain, 400, "unsupported_parameter", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := tc.h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", "/v1/responses", "authorization", "Bearer "+keyAlpha))
			resp := roundTrip(t, st, reqBody(`{"model":"chat","input":"hi","previous_response_id":"`+tc.id+`"}`))
			if tc.status == 0 {
				cr := resp.GetRequestBody().GetResponse()
				if cr == nil {
					t.Fatalf("not admitted: %v", resp)
				}
				if got := setOf(t, cr.GetHeaderMutation())[contract.HeaderPool]; got != tc.pool {
					t.Fatalf("pool %q, want %q", got, tc.pool)
				}
				return
			}
			ir := resp.GetImmediateResponse()
			if ir == nil || int(ir.GetStatus().GetCode()) != tc.status {
				t.Fatalf("want %d, got %v", tc.status, resp)
			}
			var e openAIError
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error.Code == nil || *e.Error.Code != tc.code ||
				e.Error.Param == nil || *e.Error.Param != "previous_response_id" {
				t.Fatalf("error body %s", ir.GetBody())
			}
			// A store that did not answer says when to come back; a
			// client error does not invite a retry.
			if ra, want := setOf(t, ir.GetHeaders())["retry-after"], map[bool]string{true: "1"}[tc.status == 503]; ra != want {
				t.Errorf("retry-after %q, want %q", ra, want)
			}
		})
	}
}
