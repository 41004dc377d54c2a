package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

func TestAdmissionEndpoint(t *testing.T) {
	withWait := func(d time.Duration) func() *config.Config {
		cfg := testConfig(t)
		cfg.Admission.MaxWait.Duration = d
		return func() *config.Config { return cfg }
	}
	cases := []struct {
		name     string
		config   func() *config.Config
		queue    QueueSource
		queueing bool
		reason   string
		scopes   int // -1: no queue state in the answer
	}{
		{"queueing", withWait(2 * time.Second), queued(), true, "", 2},
		{"max_wait 0", withWait(0), queued(), false, "admission.max_wait is 0", 2},
		{"no queue in this process", withWait(2 * time.Second), nil, false, "no admission queue in this process", -1},
		{"nobody waiting", withWait(2 * time.Second), QueueSourceFunc(func(context.Context) (QueueState, error) {
			return QueueState{MaxQueue: 1024}, nil
		}), true, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := fullOptions(t)
			opts.Config, opts.Queue = c.config, c.queue
			ts := startServer(t, opts)
			status, h, body := get(t, ts.URL+"/admission")
			if status != http.StatusOK || !strings.Contains(h.Get("Content-Type"), "application/json") {
				t.Fatalf("status %d %q: %s", status, h.Get("Content-Type"), body)
			}
			var resp admissionResponse
			if err := json.Unmarshal([]byte(body), &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Queueing != c.queueing || resp.Reason != c.reason {
				t.Errorf("queueing %v %q, want %v %q", resp.Queueing, resp.Reason, c.queueing, c.reason)
			}
			switch {
			case c.scopes < 0 && resp.QueueState != nil:
				t.Errorf("queue state without a queue: %s", body)
			case c.scopes >= 0 && (resp.QueueState == nil || len(resp.Scopes) != c.scopes):
				t.Errorf("want %d scopes: %s", c.scopes, body)
			case c.scopes == 0 && !strings.Contains(body, `"scopes": []`):
				t.Errorf("empty scopes not a list: %s", body)
			}
		})
	}
}

// TestAdmissionJSONShape pins the field names the status page reads.
func TestAdmissionJSONShape(t *testing.T) {
	ts := startServer(t, fullOptions(t))
	_, _, body := get(t, ts.URL+"/admission")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"queueing": true, "max_wait_seconds": 2.0, "waiting": 5.0, "max_queue": 1024.0,
		"counters": map[string]any{"admitted_after_wait": 41.0, "timed_out": 3.0, "cancelled": 2.0,
			"too_long": 7.0, "full": 1.0, "order_down": 0.0},
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	scope := got["scopes"].([]any)[0]
	wantScope := map[string]any{"scope": "relay-a", "depth": 4.0, "oldest_wait_seconds": 1.25, "waiters": []any{
		map[string]any{"tenant": "team-blue", "class": 2.0, "class_name": "bulk", "count": 1.0},
		map[string]any{"tenant": "team-red", "class": 0.0, "class_name": "planner", "count": 1.0},
		map[string]any{"tenant": "team-red", "class": 2.0, "class_name": "bulk", "count": 2.0},
	}}
	if !reflect.DeepEqual(scope, wantScope) {
		t.Errorf("first scope\n got %#v\nwant %#v", scope, wantScope)
	}
}

func TestAdmissionSourceError(t *testing.T) {
	opts := fullOptions(t)
	opts.Queue = QueueSourceFunc(func(context.Context) (QueueState, error) { return QueueState{}, errDown })
	ts := startServer(t, opts)
	if status, _, body := get(t, ts.URL+"/admission"); status != http.StatusServiceUnavailable || !strings.Contains(body, "connection refused") {
		t.Errorf("%d %s", status, body)
	}
}

// TestAdmissionAccess: /admission goes through the same checks as every
// data endpoint: token, Host, Origin, read-only.
func TestAdmissionAccess(t *testing.T) {
	opts := fullOptions(t)
	opts.Access = config.Admin{Token: config.SecretFromValue("env:T_ADMIN", testAdminToken)}
	ts := startServer(t, opts)
	bearer := map[string]string{"Authorization": "Bearer " + testAdminToken}
	cases := []struct {
		name   string
		method string
		host   string
		hdr    map[string]string
		status int
	}{
		{"no token", http.MethodGet, "", nil, http.StatusUnauthorized},
		{"wrong token", http.MethodGet, "", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"token", http.MethodGet, "", bearer, http.StatusOK},
		{"foreign host", http.MethodGet, "attacker.example", bearer, http.StatusMisdirectedRequest},
		{"cross origin", http.MethodGet, "", map[string]string{"Authorization": "Bearer " + testAdminToken, "Origin": "http://attacker.example"}, http.StatusForbidden},
		{"post", http.MethodPost, "", bearer, http.StatusMethodNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, _, body := call(t, c.method, ts.URL+"/admission", c.host, c.hdr)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if status != http.StatusOK {
				assertNoData(t, body)
				if strings.Contains(body, "scopes") {
					t.Errorf("refused answer carries the queue: %s", body)
				}
			}
		})
	}
}
