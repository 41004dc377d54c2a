package extproc_test

import (
	"encoding/json"
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// TestStoredObjectsRefused: a request that names an object stored with
// the provider (a file, vector store, conversation…) is refused with 400
// in the caller's API shape, naming the member; every tenant's requests go
// out on the same provider accounts, so the id would read whatever the
// account holds under it.
func TestStoredObjectsRefused(t *testing.T) {
	h := newHarness(t, testConfig(t))
	for _, tc := range []struct {
		name, path, body, param string
		anthropic               bool
	}{
		{"chat file part", "/v1/chat/completions",
			`{"model":"chat","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, "file_id", false},
		{"responses conversation", "/v1/responses", `{"model":"chat","input":"hi","conversation":"conv_abc"}`, "conversation", false},
		{"responses file_search", "/v1/responses",
			`{"model":"chat","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_abc"]}]}`, "vector_store_ids", false},
		{"messages file source", "/v1/messages",
			`{"model":"chat","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_abc"}}]}]}`, "file_id", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			hs := []string{":method", "POST", ":path", tc.path, "authorization", "Bearer " + keyAlpha}
			if tc.anthropic {
				hs = append(hs, "anthropic-version", "2023-06-01")
			}
			roundTrip(t, st, reqHeaders(false, hs...))
			ir := roundTrip(t, st, reqBody(tc.body)).GetImmediateResponse()
			if ir.GetStatus().GetCode() != 400 {
				t.Fatalf("want 400, got %v %s", ir.GetStatus(), ir.GetBody())
			}
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type  string  `json:"type"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error.Type != "invalid_request_error" {
				t.Fatalf("body %s", ir.GetBody())
			}
			if tc.anthropic != (e.Type == "error") || (!tc.anthropic && (e.Error.Param == nil || *e.Error.Param != tc.param)) {
				t.Fatalf("not in the caller's shape, or the member not named: %s", ir.GetBody())
			}
		})
	}
}
