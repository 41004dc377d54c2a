package telemetry

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

func sampleLog() RequestLog {
	return RequestLog{
		RequestID: "req-1", Tenant: "alpha", VirtualKeyID: "a1", Model: "m1", UpstreamModel: "vendor/m1-large", UpstreamRequestID: "req_provider_1", Backend: "b1", KeyID: "b1-k1",
		Attempts: 2, Status: 200, Stream: true, Tokens: Tokens{Input: 100, Output: 31, CachedInput: 10},
		Cost: 0.0125, Latency: 1500 * time.Millisecond, TTFT: 250 * time.Millisecond,
		RequestBody:  []byte(`{"model":"m1","messages":[{"role":"user","content":"key sk-leaked-secret-42"}],"api_key":"hunter2"}`),
		ResponseBody: []byte(`{"choices":[{"message":{"content":"hi"}}]}`),
	}
}

func decodeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not one JSON object per line: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogRequest(t *testing.T) {
	var buf bytes.Buffer
	LogRequest(slog.New(slog.NewJSONHandler(&buf, nil)), sampleLog())
	lines := decodeLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1", len(lines))
	}
	l := lines[0]
	want := map[string]any{
		"msg": AccessLogMessage, "level": "INFO", "request_id": "req-1", "tenant": "alpha", "virtual_key_id": "a1",
		"model": "m1", "upstream_model": "vendor/m1-large", "upstream_request_id": "req_provider_1", "backend": "b1", "key_id": "b1-k1", "attempts": 2.0, "status": 200.0, "stream": true,
		"input_tokens": 100.0, "output_tokens": 31.0, "cached_input_tokens": 10.0, "cost": 0.0125,
		"latency_ms": 1500.0, "ttft_ms": 250.0,
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, l[k], l[k], v)
		}
	}
	for _, k := range []string{"request_body", "response_body", "reason"} {
		if _, ok := l[k]; ok {
			t.Errorf("%s logged without debug bodies", k)
		}
	}
	if strings.Contains(buf.String(), "hunter2") || strings.Contains(buf.String(), "sk-leaked") {
		t.Error("body content logged")
	}
}

func TestLogRequestLevels(t *testing.T) {
	cases := []struct {
		status int
		level  string
	}{{200, "INFO"}, {429, "INFO"}, {502, "WARN"}, {0, "WARN"}}
	for _, c := range cases {
		var buf bytes.Buffer
		r := sampleLog()
		r.Status, r.Reason = c.status, "why"
		LogRequest(slog.New(slog.NewJSONHandler(&buf, nil)), r)
		l := decodeLines(t, &buf)[0]
		if l["level"] != c.level || l["reason"] != "why" {
			t.Errorf("status %d: level %v reason %v", c.status, l["level"], l["reason"])
		}
	}
}

func TestAccessLog(t *testing.T) {
	cases := []struct {
		name       string
		cfg        config.Telemetry
		lines      int
		withBodies bool
	}{
		{"off", config.Telemetry{AccessLog: false, DebugBodies: true}, 0, false},
		{"on", config.Telemetry{AccessLog: true}, 1, false},
		{"debug bodies", config.Telemetry{AccessLog: true, DebugBodies: true}, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			NewAccessLog(slog.New(slog.NewJSONHandler(&buf, nil)), c.cfg).Log(sampleLog())
			lines := decodeLines(t, &buf)
			if len(lines) != c.lines {
				t.Fatalf("%d lines, want %d", len(lines), c.lines)
			}
			if c.lines == 0 {
				return
			}
			req, hasReq := lines[0]["request_body"].(string)
			_, hasResp := lines[0]["response_body"].(string)
			if hasReq != c.withBodies || hasResp != c.withBodies {
				t.Fatalf("bodies logged %v/%v, want %v", hasReq, hasResp, c.withBodies)
			}
			if strings.Contains(buf.String(), "hunter2") || strings.Contains(buf.String(), "sk-leaked-secret-42") {
				t.Errorf("secret in log: %s", buf.String())
			}
			if c.withBodies && !strings.Contains(req, `"role":"user"`) {
				t.Errorf("request body lost its content: %s", req)
			}
		})
	}
	var nilLog *AccessLog
	nilLog.Log(sampleLog())
}

func TestCut(t *testing.T) {
	body := []byte(`{"content":"aaaa sk-abcdefghijklmnop"}`)
	// Cutting inside the key would leave "sk-abcd", too short to look like a
	// key: cut moves back to the space before it.
	got := string(cut(body, 20))
	if got != `{"content":"aaaa ` {
		t.Errorf("cut = %q", got)
	}
	if string(cut(body, 1000)) != string(body) {
		t.Error("short body changed")
	}
}

func BenchmarkLogRequest(b *testing.B) {
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	r := sampleLog()
	b.ReportAllocs()
	for b.Loop() {
		LogRequest(logger, r)
	}
}

// A reload turns the access log and its debug bodies on and off.
func TestAccessLogSetConfig(t *testing.T) {
	var buf bytes.Buffer
	a := NewAccessLog(slog.New(slog.NewJSONHandler(&buf, nil)), config.Telemetry{})
	steps := []struct {
		cfg        config.Telemetry
		lines      int
		withBodies bool
	}{
		{config.Telemetry{}, 0, false},
		{config.Telemetry{AccessLog: true}, 1, false},
		{config.Telemetry{AccessLog: true, DebugBodies: true}, 1, true},
		{config.Telemetry{AccessLog: false, DebugBodies: true}, 0, false},
	}
	for i, st := range steps {
		buf.Reset()
		a.SetConfig(st.cfg)
		a.Log(sampleLog())
		lines := decodeLines(t, &buf)
		if len(lines) != st.lines {
			t.Fatalf("step %d: %d lines, want %d", i, len(lines), st.lines)
		}
		if st.lines > 0 {
			if _, has := lines[0]["request_body"]; has != st.withBodies {
				t.Errorf("step %d: body logged %v, want %v", i, has, st.withBodies)
			}
		}
	}
	var nilLog *AccessLog
	nilLog.SetConfig(config.Telemetry{AccessLog: true})
}

// TestLogRequestClipsTheClientsModel: the model a refused request asked for
// is the client's string as sent; the line keeps at most maxLoggedField
// bytes of it, cut on a rune boundary.
func TestLogRequestClipsTheClientsModel(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		want        int // bytes of the model kept (before the mark)
	}{
		{"short", "gpt-4o", 6},
		{"at the bound", strings.Repeat("m", maxLoggedField), maxLoggedField},
		{"megabytes", strings.Repeat("m", 4<<20), maxLoggedField},
		{"multibyte at the cut", strings.Repeat("m", maxLoggedField-1) + "é" + strings.Repeat("m", 10), maxLoggedField - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := sampleLog()
			r.Model = tc.model
			LogRequest(slog.New(slog.NewJSONHandler(&buf, nil)), r)
			got, _ := decodeLines(t, &buf)[0]["model"].(string)
			if kept := strings.TrimSuffix(got, "…"); kept != tc.model[:tc.want] {
				t.Fatalf("model logged as %d bytes %q…, want the first %d", len(got), got[:min(len(got), 20)], tc.want)
			}
		})
	}
}
