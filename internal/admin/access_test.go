package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/logbuf"
)

const testAdminToken = "admin-DISTINCTIVE-token-61be"

// call sends one request over the real socket with the given Host and
// headers.
func call(t *testing.T, method, url, host string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// dataMarkers appear only in answers that carry admin data.
var dataMarkers = []string{"relay-a", "team-red", "swarmgate_admin_test_total"}

func assertNoData(t *testing.T, body string) {
	t.Helper()
	for _, m := range dataMarkers {
		if strings.Contains(body, m) {
			t.Errorf("refused answer carries data (%q): %s", m, body)
		}
	}
}

func TestHostAndOriginChecks(t *testing.T) {
	opts := fullOptions(t)
	opts.Access = config.Admin{AllowedHosts: []string{"admin.internal"}}
	ts := startServer(t, opts)
	cases := []struct {
		name   string
		host   string
		hdr    map[string]string
		status int
	}{
		{"loopback as dialled", "", nil, 200},
		{"localhost any port", "LocalHost.:1234", nil, 200},
		{"IP literal", "10.1.2.3:19000", nil, 200},
		{"IPv6 literal", "[::1]:19000", nil, 200},
		{"allowed name", "admin.internal:19000", nil, 200},
		{"rebinding name", "attacker.example", nil, http.StatusMisdirectedRequest},
		{"rebinding name with port", "attacker.example:19000", nil, http.StatusMisdirectedRequest},
		{"suffix of an allowed name", "evil-admin.internal", nil, http.StatusMisdirectedRequest},
		{"same origin", "", map[string]string{"Origin": "http://{host}", "Sec-Fetch-Site": "same-origin"}, 200},
		{"typed into the address bar", "", map[string]string{"Sec-Fetch-Site": "none"}, 200},
		{"cross origin", "", map[string]string{"Origin": "http://attacker.example"}, http.StatusForbidden},
		{"other port of localhost", "", map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"null origin", "", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"cross-site fetch without origin", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site fetch", "", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{}
			for k, v := range c.hdr {
				hdr[k] = strings.ReplaceAll(v, "{host}", strings.TrimPrefix(ts.URL, "http://"))
			}
			for _, path := range []string{"/keys", "/config_dump", "/metrics", "/usage/team-red", "/admission"} {
				status, h, body := call(t, http.MethodGet, ts.URL+path, c.host, hdr)
				if status != c.status {
					t.Fatalf("%s: status %d, want %d: %s", path, status, c.status, body)
				}
				if status != 200 {
					assertNoData(t, body)
					if !strings.Contains(h.Get("Content-Type"), "application/json") || !strings.Contains(body, `"error"`) {
						t.Errorf("%s: refusal is not a JSON error: %q %s", path, h.Get("Content-Type"), body)
					}
				}
			}
		})
	}
}

func TestReadOnly(t *testing.T) {
	ts := startServer(t, fullOptions(t))
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		for _, path := range []string{"/keys", "/usage", "/usage/team-red", "/refusals", "/healthz", "/nope"} {
			status, h, body := call(t, method, ts.URL+path, "", nil)
			if status != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d allow=%q, want 405 GET, HEAD: %s", method, path, status, h.Get("Allow"), body)
			}
			assertNoData(t, body)
		}
	}
	if status, _, _ := call(t, http.MethodHead, ts.URL+"/keys", "", nil); status != 200 {
		t.Errorf("HEAD /keys: %d", status)
	}
}

func TestToken(t *testing.T) {
	var logs logbuf.Buffer
	opts := fullOptions(t)
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Access = config.Admin{Token: config.SecretFromValue("env:T_ADMIN", testAdminToken)}
	ts := startServer(t, opts)
	bearer := func(v string) map[string]string { return map[string]string{"Authorization": v} }
	cases := []struct {
		name   string
		path   string
		hdr    map[string]string
		status int
	}{
		{"no token", "/keys", nil, 401},
		{"no token on metrics", "/metrics", nil, 401},
		{"no token on usage", "/usage/team-red", nil, 401},
		{"no token on config dump", "/config_dump", nil, 401},
		{"wrong token", "/keys", bearer("Bearer " + testAdminToken + "x"), 401},
		{"prefix of the token", "/keys", bearer("Bearer " + testAdminToken[:10]), 401},
		{"basic scheme", "/keys", bearer("Basic " + testAdminToken), 401},
		{"token without scheme", "/keys", bearer(testAdminToken), 401},
		{"right token", "/keys", bearer("Bearer " + testAdminToken), 200},
		{"scheme is case-insensitive", "/budgets", bearer("bearer " + testAdminToken), 200},
		{"right token on metrics", "/metrics", bearer("Bearer " + testAdminToken), 200},
		{"right token on config dump", "/config_dump", bearer("Bearer " + testAdminToken), 200},
		{"liveness needs none", "/healthz", nil, 200},
		{"readiness needs none", "/readyz", nil, 200},
		{"status page needs none", "/", nil, 200},
		{"status script needs none", "/static/status.js", nil, 200},
		{"unknown path needs the token first", "/nope", nil, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, h, body := call(t, http.MethodGet, ts.URL+c.path, "", c.hdr)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if status == 401 {
				assertNoData(t, body)
				if h.Get("WWW-Authenticate") == "" || !strings.Contains(body, `"error"`) {
					t.Errorf("401 without WWW-Authenticate or JSON error: %v %s", h, body)
				}
			}
			if strings.Contains(body, testAdminToken) {
				t.Errorf("answer contains the token: %s", body)
			}
		})
	}
	_, _, dump := call(t, http.MethodGet, ts.URL+"/config_dump", "", bearer("Bearer "+testAdminToken))
	if !strings.Contains(dump, "relay-a") {
		t.Errorf("config dump with the token: %s", dump)
	}
	if strings.Contains(logs.String(), testAdminToken) {
		t.Errorf("the token was logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "request refused") {
		t.Errorf("refusals are not logged at debug:\n%s", logs.String())
	}
}

// A token the process could not resolve (its config was loaded without
// secrets) protects everything rather than nothing.
func TestTokenUnresolvedFailsClosed(t *testing.T) {
	opts := fullOptions(t)
	opts.Access = config.Admin{Token: config.SecretRef("env:T_ADMIN")}
	ts := startServer(t, opts)
	if status, _, body := call(t, http.MethodGet, ts.URL+"/keys", "", nil); status != http.StatusServiceUnavailable {
		t.Errorf("/keys: %d %s", status, body)
	}
	if status, _, _ := call(t, http.MethodGet, ts.URL+"/healthz", "", nil); status != 200 {
		t.Errorf("/healthz: %d", status)
	}
}

func TestHostAllowed(t *testing.T) {
	ac := newAccess(config.Admin{AllowedHosts: []string{"Admin.Example.", "gw"}}, "swarmgate-0.internal:19000")
	cases := []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"localhost:8080", true},
		{"127.0.0.1:19000", true},
		{"[::1]:19000", true},
		{"[::1]", true},
		{"192.0.2.7", true},
		{"swarmgate-0.internal:19000", true},
		{"swarmgate-0.internal.", true},
		{"admin.example", true},
		{"ADMIN.EXAMPLE:443", true},
		{"gw:19000", true},
		{"", false},
		{":19000", false},
		{"attacker.example", false},
		{"localhost.attacker.example", false},
		{"127.0.0.1.nip.io", false},
		{"swarmgate-0", false},
	}
	for _, c := range cases {
		if got := ac.hostAllowed(c.host); got != c.want {
			t.Errorf("hostAllowed(%q) = %v, want %v", c.host, got, c.want)
		}
	}
}
