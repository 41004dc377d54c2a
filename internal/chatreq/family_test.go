package chatreq

import "testing"

// TestScanOtherFamilies: the one scanner reads the Anthropic Messages and
// Responses fields the families need.
func TestScanOtherFamilies(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want Request
	}{
		{"anthropic system, blocks and tool_result",
			`{"model":"claude","max_tokens":64,"system":[{"type":"text","text":"be"}],"stream":true,` +
				`"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"ok"}]}]}]}`,
			Request{Model: "claude", Stream: true, MaxTokens: 64, HasMaxTokens: true, Messages: 2, PromptBytes: 6}}, // a system block counts as an item
		{"anthropic without max_tokens", `{"model":"claude","messages":[]}`, Request{Model: "claude"}},
		{"responses previous_response_id", `{"model":"m","input":"x","previous_response_id":"resp_1"}`,
			Request{Model: "m", PromptBytes: 1, PreviousResponseID: true, PreviousResponse: "resp_1"}},
		{"responses empty previous_response_id", `{"model":"m","previous_response_id":""}`, Request{Model: "m"}},
	} {
		got, err := Scan([]byte(tc.body))
		got.at = edits{}
		if err != nil || got != tc.want {
			t.Errorf("%s: Scan = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
