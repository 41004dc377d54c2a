package mockupstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	keyA = "sk-mock-alpha-0001"
	keyB = "sk-mock-bravo-0002"
)

func testKeys() []Key { return []Key{{ID: "a", Value: keyA}, {ID: "b", Value: keyB}} }

// start serves opts on 127.0.0.1:0 for the test.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s := New(opts)
	if _, err := s.Start(t.Context(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient never reuses connections, so a reset hits only its request.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

func post(t *testing.T, s *Server, path, key string, body any, hdr map[string]string) (*http.Response, []byte, error) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := newClient().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

func chatBody(content string, stream, includeUsage bool) map[string]any {
	b := map[string]any{"model": "gpt-4o-mini", "messages": []map[string]any{{"role": "user", "content": content}}}
	if stream {
		b["stream"] = true
	}
	if includeUsage {
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	return b
}

// sseEvents splits an SSE body into its data payloads, checking the framing
// ("data: <payload>\n\n" and nothing else).
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("SSE body does not end in a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(payload, "\n") {
			t.Fatalf("bad SSE event %q", ev)
		}
		out = append(out, payload)
	}
	return out
}

// readEvents reads SSE data payloads until EOF or an error.
func readEvents(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("not JSON: %v: %q", err, data)
	}
	return m
}

// fakeClock is a settable clock for RPM windows.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var contextCanceled = context.Canceled

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx, cancel
}
