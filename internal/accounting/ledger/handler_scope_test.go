package ledger

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// /usage by key, by label and the rankings; every malformed query is a 400
// saying what is wrong.
func TestHandlerKeysAndLabels(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	cfg := handlerConfig(t)
	u := pricing.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}
	for _, e := range []Entry{
		{RequestID: "r1", Tenant: "acme", VirtualKeyID: "sk_1", Labels: map[string]string{"run": "nightly-42"}, Time: testTime, Usage: u, Cost: pricing.FromFloat(0.5)},
		{RequestID: "r2", Tenant: "acme", VirtualKeyID: "v1", Time: testTime, Usage: u, Cost: pricing.FromFloat(0.25)},
	} {
		if err := l.Record(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(l.Handler(func() *config.Config { return cfg }))
	defer srv.Close()
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"?key=sk_1&month=2026-12", 200, `"tenant":"acme","key":"sk_1","month":"2026-12","currency":"EUR","total":{"requests":1,"input_tokens":10,"output_tokens":5,"total_tokens":15,`},
		{"?key=sk_1&month=2026-12", 200, `"all_time":{"requests":1,`},
		{"?key=sk_1&tenant=acme&month=2026-11", 200, `"total":{"requests":0,`},
		{"?key=v1&month=2026-11", 200, `"tenant":"acme","key":"v1"`}, // a config key: known without spend
		{"?key=sk_nope", 404, "no usage recorded for this key"},
		{"?key=", 400, "key must be a key id"},
		{"?key=sk_1&tenant=nobody", 404, "unknown tenant"},
		{"?label=run=nightly-42&month=2026-12", 200, `"label":{"name":"run","value":"nightly-42"},"month":"2026-12","currency":"EUR","total":{"requests":1,`},
		{"?label=run=nightly-42&month=2026-12", 200, `"tenants":[{"tenant":"acme","total":{"requests":1,`},
		{"?label=run=nightly-43&month=2026-12", 200, `"total":{"requests":0,`},
		{"?label=run", 400, "label must be name=value"},
		{"?label==x", 400, "label must be name=value"},
		{"?label=run=a&label=team=b", 400, "label given 2 times"},
		{"?label=run=a&key=sk_1", 400, "one of request_id, key, label and top"},
		{"?top=keys&month=2026-12", 200, `"by":"keys","top":[{"tenant":"acme","key":"sk_1","total":{"requests":1,`},
		{"?top=label:run&month=2026-12&limit=1", 200, `"by":"label:run","top":[{"tenant":"acme","label":{"name":"run","value":"nightly-42"}`},
		{"?top=runs", 400, "top must be keys or label:NAME"},
		{"?top=keys&limit=0", 400, "limit must be 1 to 100"},
		{"?top=keys&limit=101", 400, "limit must be 1 to 100"},
		{"?tenant=acme&limit=5", 400, "limit goes with top"},
		{"?top=keys&month=26-12", 400, "YYYY-MM"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/usage" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(buf.String(), tc.body) || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s, want %d containing %s", resp.StatusCode, buf.String(), tc.code, tc.body)
			}
			if tc.code >= 400 {
				var e struct {
					Error struct{ Message string } `json:"error"`
				}
				if err := json.Unmarshal(buf.Bytes(), &e); err != nil || e.Error.Message == "" {
					t.Fatalf("error body %s: %v", buf.String(), err)
				}
			}
		})
	}
}
