package extproc_test

import (
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// The gateway reads every answer it bills and decodes gzip only, so the
// client's accept-encoding reaches a provider reduced to what the gateway
// reads: a brotli answer's usage went unread and its output was billed as
// nothing (a client could ask for br on purpose).
func TestAcceptEncodingReducedToReadable(t *testing.T) {
	tests := []struct {
		client string
		want   string // "-": removed; "=": left as the client sent it
	}{
		{"gzip", "="},
		{"identity", "="},
		{"br", "-"},
		{"br, gzip", "gzip"},
		{"gzip, deflate, br, zstd", "gzip"},
		{"GZIP;q=0.5, br", "gzip"},
		{"gzip;q=0, br", "-"},
		{"x-gzip", "gzip"},
		{"*", "gzip"},
		{"zstd;q=1.0, deflate", "-"},
	}
	h := newHarness(t, testConfig(t))
	for _, tc := range tests {
		t.Run(tc.client, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			resp := roundTrip(t, st, reqHeaders(false, chatHeaders(keyAlpha, "accept-encoding", tc.client)...))
			m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
			set, removed := setOf(t, m)["accept-encoding"], contains(m.GetRemoveHeaders(), "accept-encoding")
			switch tc.want {
			case "=":
				if set != "" || removed {
					t.Errorf("changed: set %q removed %v; want it left as sent", set, removed)
				}
			case "-":
				if !removed || set != "" {
					t.Errorf("set %q removed %v; want removed", set, removed)
				}
			default:
				if set != tc.want || removed {
					t.Errorf("set %q removed %v; want %q", set, removed, tc.want)
				}
			}
		})
	}
}

// An answer in an encoding the gateway does not read (a provider that
// ignored accept-encoding) cannot be counted: it is billed the most the
// request could cost (prompt estimate plus max output), estimated, not the
// prompt estimate alone with its output free.
func TestUnreadableAnswerBilledReserved(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, `{"model":"chat","max_tokens":300,"messages":[{"role":"user","content":"hello"}]}`)
	defer cancel()
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", "content-encoding", "br",
		contract.HeaderBackend, "small", contract.HeaderUpstreamKey, "small-1"))
	roundTrip(t, st, respBody([]byte("\x1b\x03\x00\xf8brotli bytes"), true))
	e := h.cap.waitEntry(t)
	if !e.Estimated || e.Usage.CompletionTokens != 300 || e.Usage.PromptTokens <= 0 {
		t.Fatalf("entry usage %+v estimated %v; want the prompt estimate and 300 output tokens, estimated", e.Usage, e.Estimated)
	}
}
