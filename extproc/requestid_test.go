package extproc_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// logLines are the JSON log lines written to buf so far, decoded.
func logLines(t *testing.T, buf *logbuf.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("access log line %q: %v", ln, err)
		}
		out = append(out, m)
	}
	return out
}

func withAccessLog(buf *logbuf.Buffer) func(*extproc.Options) {
	return func(o *extproc.Options) {
		o.AccessLog = telemetry.NewAccessLog(slog.New(slog.NewJSONHandler(buf, nil)), config.Telemetry{AccessLog: true})
	}
}

// immediate is a local answer's status and headers.
func immediate(t *testing.T, resp *extprocv3.ProcessingResponse) (int, map[string]string) {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("not a local answer: %v", resp)
	}
	return int(ir.GetStatus().GetCode()), setOf(t, ir.GetHeaders())
}

// Every refusal the router-level filter makes carries the gateway's
// request id, under the name the client's SDK reads (x-request-id for the
// OpenAI shape, request-id for Anthropic's), and the access log line of
// that refusal has the same id.
func TestRefusalsCarryTheRequestID(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string
		auth   string
		length string
		body   string // "" when the headers are refused
		status int
		header string
	}{
		{"no key", "/v1/chat/completions", "", "", "", 401, "x-request-id"},
		{"no key, Anthropic", "/v1/messages", "", "", "", 401, "request-id"},
		{"too large", "/v1/chat/completions", keyAlpha, "99999", "", 413, "x-request-id"},
		{"bad JSON", "/v1/chat/completions", keyAlpha, "", `{"model":`, 400, "x-request-id"},
		{"bad JSON, Anthropic", "/v1/messages", keyAlpha, "", `{"model":`, 400, "request-id"},
		{"unknown model", "/v1/chat/completions", keyBeta, "", `{"model":"nope","messages":[]}`, 404, "x-request-id"},
		{"keys exhausted", "/v1/chat/completions", keyBeta, "", `{"model":"secret-model","messages":[{"role":"user","content":"hi"}]}`, 429, "x-request-id"},
		{"keys exhausted, Anthropic", "/v1/messages", keyBeta, "", `{"model":"secret-model","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, 429, "request-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf logbuf.Buffer
			h := newHarness(t, testConfig(t), withAccessLog(&buf))
			// Every key of "big" (secret-model's only backend) rests.
			for _, k := range []string{"big-1", "big-2"} {
				o := keypool.ParseOutcome(429, func(n string) string {
					if n == "retry-after" {
						return "30"
					}
					return ""
				})
				_ = h.pool.Report(t.Context(), "big", k, "", o)
			}
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			kv := []string{":method", "POST", ":path", tc.path, contract.HeaderRequestID, "client-chosen"}
			if tc.auth != "" {
				kv = append(kv, "authorization", "Bearer "+tc.auth)
			}
			if tc.length != "" {
				kv = append(kv, "content-length", tc.length)
			}
			resp := roundTrip(t, st, reqHeaders(false, kv...))
			if tc.body != "" {
				if resp.GetImmediateResponse() != nil {
					t.Fatalf("headers refused: %v", resp)
				}
				resp = roundTrip(t, st, reqBody(tc.body))
			}
			status, hs := immediate(t, resp)
			if status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
			id := hs[tc.header]
			if !strings.HasPrefix(id, "sg-") {
				t.Fatalf("%s = %q, want the gateway's id; headers %v", tc.header, id, hs)
			}
			other := map[string]string{"x-request-id": "request-id", "request-id": "x-request-id"}[tc.header]
			if v, ok := hs[other]; ok {
				t.Errorf("also %s: %q", other, v)
			}
			if tc.status == 429 && !secondsLeft(hs["retry-after"], 31) { // 30 s and the EDS settle, rounded up
				t.Errorf("retry-after %q, want 31", hs["retry-after"])
			}
			lines := logLines(t, &buf)
			if len(lines) != 1 || lines[0]["request_id"] != id || lines[0]["client_request_id"] != "client-chosen" {
				t.Errorf("access log %v, want one line with request_id %s", lines, id)
			}
		})
	}
}

// An answered request carries its id on the answer's headers, native and
// translated, and the same id is in the access log, the span and the
// ledger entry.
func TestAnswersCarryTheRequestIDEverywhere(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, header string
	}{
		{"chat", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`, "x-request-id"},
		{"messages translated", "/v1/messages", `{"model":"chat","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, "request-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf logbuf.Buffer
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			h := newHarness(t, testConfig(t), withAccessLog(&buf), func(o *extproc.Options) { o.Tracer = tp.Tracer("test") })
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", tc.path, "authorization", "Bearer "+keyAlpha))
			roundTrip(t, st, reqBody(tc.body))
			resp := roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json",
				contract.HeaderBackend, "small", contract.HeaderUpstreamKey, "small-1", "x-request-id", "provider-id"))
			hs := setOf(t, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
			id := hs[tc.header]
			if !strings.HasPrefix(id, "sg-") {
				t.Fatalf("%s = %q, want the gateway's id; headers %v", tc.header, id, hs)
			}
			other := map[string]string{"x-request-id": "request-id", "request-id": "x-request-id"}[tc.header]
			if rm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, other) {
				t.Errorf("the provider's %s stays beside the gateway's id: removed %v", other, rm)
			}
			roundTrip(t, st, respBody(fixture(t, "openai_chat.json"), true))
			if e := h.cap.waitEntry(t); e.RequestID != id {
				t.Errorf("ledger entry request id %q, want %q", e.RequestID, id)
			}
			if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["request_id"] != id || lines[0]["upstream_request_id"] != "provider-id" {
				t.Errorf("access log %v, want request_id %s and the provider's id", lines, id)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			found := false
			for _, kv := range spans[0].Attributes() {
				if kv.Key == telemetry.AttrRequestID {
					found = kv.Value.AsString() == id
				}
			}
			if !found {
				t.Errorf("span attributes %v, want %s = %s", spans[0].Attributes(), telemetry.AttrRequestID, id)
			}
		})
	}
}
