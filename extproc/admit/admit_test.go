package admit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

const (
	keyAlpha   = "sk-alpha"
	keyCapped  = "sk-capped"
	keyRevoked = "sk-revoked"
)

// testConfig has a hard-capped tenant (capped), an open one (alpha) and
// the queue settings the steps read; tokens is accounting.token_limits.
func testConfig(t *testing.T, tokens string, maxWait string) *config.Config {
	t.Helper()
	y := `
request: {max_body_bytes: 4096, default_max_output_tokens: 100, bytes_per_token: 4, long_max_tokens: 2000, long_when_tools: true}
admission: {max_wait: ` + maxWait + `, class_header: x-class, classes: [{name: fast, priority: 0, max_wait: 3s}, {name: bulk, priority: 2}]}
failure_modes: {budget: closed}
accounting: {token_limits: ` + tokens + `, currency: EUR}
backends:
  - name: big
    base_url: http://127.0.0.1:9/v1
    families: [chat_completions, embeddings, responses]
    keys: [{id: big-1, secret: env:K}]
  - name: ant
    base_url: http://127.0.0.1:9/anthropic
    api_style: anthropic
    keys: [{id: ant-1, secret: env:K}]
models:
  - name: chat
    targets:
      - {backend: big, price: {input_per_mtok: 1, output_per_mtok: 2}}
      - {backend: ant, price: {input_per_mtok: 3, output_per_mtok: 15}}
  - name: secret-model
    targets: [{backend: big}]
  - name: agent
    long_running: true
    targets: [{backend: big}]
tenants:
  - name: alpha
    models: [chat, agent]
    weight: 3
    keys:
      - {id: alpha-1, hash: ` + config.HashKey(keyAlpha) + `, class: bulk, header_classes: [fast]}
      - {id: alpha-old, hash: ` + config.HashKey(keyRevoked) + `, revoked: true}
  - name: capped
    models: [chat]
    sticky: true
    budget: {monthly: 10, hard_cap: true}
    keys:
      - {id: capped-1, hash: ` + config.HashKey(keyCapped) + `}
`
	c, err := config.Parse([]byte(y), "test.yaml", config.Options{LookupEnv: func(string) (string, bool) { return "sk-upstream", true }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// facts is a request on path that passed Authenticate with key.
func facts(t *testing.T, cfg *config.Config, path, key string) *admit.Facts {
	t.Helper()
	f := &admit.Facts{RequestID: "sg-test", Path: path, RawPath: path, Spec: family.ForPath(path), Shape: family.ShapeForPath(path)}
	if r := admit.Authenticate(cfg, subkey.Auth{}, f, "Bearer "+key, ""); r != nil {
		t.Fatalf("authenticate: %+v", r)
	}
	return f
}

func wantRefusal(t *testing.T, got *admit.Refusal, status int, code string) {
	t.Helper()
	switch {
	case code == "" && got != nil:
		t.Fatalf("refused: %+v", got)
	case code != "" && got == nil:
		t.Fatalf("admitted, want %d %s", status, code)
	case code != "" && (got.Status != status || got.Code != code):
		t.Fatalf("refusal %d %s (%s), want %d %s", got.Status, got.Code, got.Message, status, code)
	}
}

func TestAuthenticate(t *testing.T) {
	cfg := testConfig(t, "ratelimit", "0s")
	tests := []struct {
		name, authorization, apiKey string
		status                      int
		code, msg, tenant           string
	}{
		{name: "bearer", authorization: "Bearer " + keyAlpha, tenant: "alpha"},
		{name: "bearer any case, spaces", authorization: "bEaReR   " + keyAlpha + " ", tenant: "alpha"},
		{name: "x-api-key", apiKey: " " + keyCapped, tenant: "capped"},
		{name: "bearer wins over x-api-key", authorization: "Bearer " + keyAlpha, apiKey: keyCapped, tenant: "alpha"},
		{name: "none", status: 401, code: "invalid_api_key", msg: "You didn't provide an API key"},
		{name: "not bearer", authorization: "Basic " + keyAlpha, status: 401, code: "invalid_api_key", msg: "You didn't provide"},
		{name: "unknown", authorization: "Bearer sk-nobody", status: 401, code: "invalid_api_key", msg: "Incorrect API key"},
		{name: "revoked", apiKey: keyRevoked, status: 401, code: "key_revoked", msg: "revoked"},
		{name: "revoked sub-key", authorization: "Bearer sk-sg-revoked", status: 401, code: "key_revoked", msg: "revoked"},
		{name: "expired sub-key", authorization: "Bearer sk-sg-expired", status: 401, code: "key_expired", msg: "expired"},
		{name: "sub-key", apiKey: "sk-sg-live", tenant: "capped"},
	}
	keys := subKeys{"sk-sg-revoked": subkey.Revoked, "sk-sg-expired": subkey.Expired, "sk-sg-live": subkey.OK}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f admit.Facts
			r := admit.Authenticate(cfg, keys, &f, tt.authorization, tt.apiKey)
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && !strings.Contains(r.Message, tt.msg) {
				t.Errorf("message %q, want %q in it", r.Message, tt.msg)
			}
			if f.Tenant() != tt.tenant {
				t.Errorf("tenant %q, want %q", f.Tenant(), tt.tenant)
			}
		})
	}
}

// subKeys answers the listed keys as sub-keys of tenant capped with their
// reason, and every other key from the config.
type subKeys map[string]subkey.Reason

func (k subKeys) Authenticate(cfg *config.Config, presented string) (config.KeyOwner, subkey.Reason) {
	r, ok := k[presented]
	if !ok {
		return subkey.Auth{}.Authenticate(cfg, presented)
	}
	t, _ := cfg.Tenant("capped")
	return config.KeyOwner{Tenant: t, Key: &config.VirtualKey{ID: "sk_1"}}, r
}

func TestEndpoint(t *testing.T) {
	cfg := testConfig(t, "ratelimit", "0s")
	tests := []struct {
		name, path, method, length string
		bodyless, local            bool
		status                     int
		code                       string
	}{
		{name: "chat", path: "/v1/chat/completions", method: "POST", length: "100"},
		{name: "models", path: "/v1/models", method: "GET", local: true, bodyless: true},
		{name: "one model", path: "/v1/models/chat", method: "GET", local: true, bodyless: true},
		{name: "unknown path", path: "/v1/images", method: "POST", status: 404, code: "unknown_url"},
		{name: "wrong method", path: "/v1/messages", method: "GET", status: 405, code: "method_not_allowed"},
		{name: "declared too large", path: "/v1/chat/completions", method: "POST", length: "4097", status: 413, code: "request_too_large"},
		{name: "at the limit", path: "/v1/chat/completions", method: "POST", length: "4096"},
		{name: "no body", path: "/v1/chat/completions", method: "POST", bodyless: true, status: 400, code: "invalid_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := facts(t, cfg, tt.path, keyAlpha)
			local, r := admit.Endpoint(cfg, f, tt.method, tt.length, tt.bodyless)
			wantRefusal(t, r, tt.status, tt.code)
			if local != tt.local {
				t.Errorf("local %v, want %v", local, tt.local)
			}
		})
	}
}

// owners is a fake affinity store.
type owners struct {
	o   admit.ResponseOwner
	err error
}

func (o owners) Owner(context.Context, string) (admit.ResponseOwner, error) { return o.o, o.err }

func TestScan(t *testing.T) {
	cfg := testConfig(t, "ratelimit", "0s")
	tests := []struct {
		name, path, key, body string
		owners                admit.Owners
		status                int
		code, param           string
		est, maxOut           int
		model                 bool // f.Model set
	}{
		{name: "chat", path: "/v1/chat/completions", key: keyAlpha, body: `{"model":"chat","messages":[{"role":"user","content":"0123456789abcdef"}]}`,
			maxOut: 100, model: true},
		{name: "max_tokens kept", path: "/v1/chat/completions", key: keyAlpha, body: `{"model":"chat","max_tokens":7,"messages":[]}`, maxOut: 7, model: true},
		{name: "embeddings reserve no output", path: "/v1/embeddings", key: keyCapped, body: `{"model":"chat","input":"x"}`, maxOut: 0, model: true},
		{name: "bad JSON", path: "/v1/chat/completions", key: keyAlpha, body: `{"model":`, status: 400, code: "invalid_json"},
		{name: "no model", path: "/v1/chat/completions", key: keyAlpha, body: `{"messages":[]}`, status: 400, code: "invalid_value", param: "model"},
		{name: "unknown model", path: "/v1/chat/completions", key: keyAlpha, body: `{"model":"nope"}`, status: 404, code: "model_not_found", param: "model"},
		{name: "not allowed", path: "/v1/chat/completions", key: keyAlpha, body: `{"model":"secret-model"}`, status: 403, code: "model_not_allowed"},
		{name: "messages need max_tokens", path: "/v1/messages", key: keyAlpha, body: `{"model":"chat","messages":[]}`, status: 400, code: "invalid_request_error", param: "max_tokens"},
		{name: "previous response without affinity", path: "/v1/responses", key: keyAlpha, body: `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			status: 400, code: "unsupported_parameter", param: "previous_response_id"},
		{name: "previous response unknown", path: "/v1/responses", key: keyAlpha, body: `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			owners: owners{err: admit.ErrUnknownResponse}, status: 400, code: "previous_response_not_found"},
		{name: "previous response of another tenant", path: "/v1/responses", key: keyAlpha, body: `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			owners: owners{o: admit.ResponseOwner{Backend: "big", KeyID: "big-1", Tenant: "capped"}}, status: 400, code: "previous_response_not_found"},
		{name: "previous response store down", path: "/v1/responses", key: keyAlpha, body: `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			owners: owners{err: errors.New("timeout")}, status: 503, code: "affinity_unavailable"},
		{name: "previous response on a backend that no longer serves it", path: "/v1/responses", key: keyAlpha,
			body:   `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			owners: owners{o: admit.ResponseOwner{Backend: "ant", KeyID: "ant-1", Tenant: "alpha"}}, status: 409, code: "previous_response_unavailable"},
		{name: "previous response pinned", path: "/v1/responses", key: keyAlpha, body: `{"model":"chat","input":"x","previous_response_id":"resp_1"}`,
			owners: owners{o: admit.ResponseOwner{Backend: "big", KeyID: "big-1", Tenant: "alpha"}}, maxOut: 100, model: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &admit.Admitter{Owners: tt.owners}
			f := facts(t, cfg, tt.path, tt.key)
			_, r := a.Scan(context.Background(), cfg, f, []byte(tt.body))
			if tt.code == "invalid_request_error" {
				// Anthropic's rule names its own code; the field is what matters.
				if r == nil || r.Status != tt.status || r.Param != tt.param {
					t.Fatalf("got %+v, want %d on %s", r, tt.status, tt.param)
				}
				return
			}
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && tt.param != "" && r.Param != tt.param {
				t.Errorf("param %q, want %q", r.Param, tt.param)
			}
			if (f.Model != nil) != tt.model {
				t.Errorf("model set %v, want %v (a refused request is not sized)", f.Model != nil, tt.model)
			}
			if r == nil && tt.owners != nil && f.Pinned.KeyID != "big-1" {
				t.Errorf("pinned to %+v", f.Pinned)
			}
			if r == nil && f.MaxOut != tt.maxOut {
				t.Errorf("max out %d, want %d", f.MaxOut, tt.maxOut)
			}
		})
	}
	t.Run("no tenant", func(t *testing.T) {
		var f admit.Facts
		_, r := (&admit.Admitter{}).Scan(context.Background(), cfg, &f, []byte(`{"model":"chat"}`))
		wantRefusal(t, r, http.StatusUnauthorized, "invalid_api_key")
	})
}

// keys is a fake key pool.
type keys struct {
	ok      bool
	retry   time.Duration
	failing bool
}

func (k *keys) Available([]string) (bool, time.Duration) { return k.ok, k.retry }
func (k *keys) Failing([]string) bool                    { return k.failing }

// queue is a fake admission queue answering res, after recording the request.
type queue struct {
	res  admit.QueueResult
	seen []admit.QueueRequest
}

func (q *queue) Admit(_ context.Context, req admit.QueueRequest, _ func() (bool, time.Duration, admit.Rate)) admit.QueueResult {
	q.seen = append(q.seen, req)
	if q.res.Waited > 0 && req.OnWait != nil {
		req.OnWait()
	}
	return q.res
}

// timer is a fake message timer.
type timer struct {
	class    string
	session  string
	extended []time.Duration
}

func (t *timer) ClassHeader() string                      { return t.class }
func (t *timer) SessionHeader() string                    { return t.session }
func (t *timer) Extend(d time.Duration)                   { t.extended = append(t.extended, d) }
func (t *timer) Left(time.Duration) (time.Duration, bool) { return 0, false }

func TestWait(t *testing.T) {
	tests := []struct {
		name       string
		maxWait    string
		keys       keys
		queue      *admit.QueueResult
		status     int
		code       string
		retryAfter time.Duration
		class      string
	}{
		{name: "keys usable", maxWait: "0s", keys: keys{ok: true}},
		{name: "busy, no queue", maxWait: "0s", keys: keys{retry: 3 * time.Second}, status: 429, code: "upstream_keys_exhausted", retryAfter: 3 * time.Second},
		{name: "failing, no queue", maxWait: "0s", keys: keys{failing: true}, status: 503, code: "upstream_keys_exhausted", retryAfter: time.Second},
		{name: "failing is not queued", maxWait: "5s", keys: keys{failing: true, retry: 2 * time.Second}, queue: &admit.QueueResult{Admitted: true},
			status: 503, code: "upstream_keys_exhausted", retryAfter: 2 * time.Second},
		{name: "queued and admitted", maxWait: "5s", keys: keys{retry: time.Second}, queue: &admit.QueueResult{Admitted: true}, class: "fast"},
		// A wait that ended: the later of the queue's place (a paced order)
		// and the keys' reopening now. Before, the keys' figure replaced the
		// queue's: 300 ahead at 5/s told the client 1 s.
		{name: "queued, waited out, place after the keys", maxWait: "5s", keys: keys{retry: 4 * time.Second},
			queue:  &admit.QueueResult{Waited: 3 * time.Second, Reason: "timeout", RetryAfter: 60 * time.Second},
			status: 429, code: "upstream_keys_exhausted", retryAfter: 60 * time.Second, class: "fast"},
		{name: "queued, waited out, keys later than the place", maxWait: "5s", keys: keys{retry: 4 * time.Second},
			queue:  &admit.QueueResult{Waited: 3 * time.Second, Reason: "timeout", RetryAfter: time.Second},
			status: 429, code: "upstream_keys_exhausted", retryAfter: 4 * time.Second, class: "fast"},
		// Refusals at once keep their own Retry-After (the queue reports how
		// long they took, so Waited is set).
		{name: "sessions full", maxWait: "5s", keys: keys{retry: time.Second},
			queue:  &admit.QueueResult{Waited: time.Millisecond, Reason: "sessions_full", RetryAfter: 4 * time.Second},
			status: 429, code: "upstream_keys_exhausted", retryAfter: 4 * time.Second, class: "fast"},
		{name: "queue full after a session's look-up", maxWait: "5s", keys: keys{retry: 3 * time.Second},
			queue:  &admit.QueueResult{Waited: time.Millisecond, Reason: "queue_full", RetryAfter: 2 * time.Second},
			status: 429, code: "upstream_keys_exhausted", retryAfter: 2 * time.Second, class: "fast"},
		{name: "queue full at once", maxWait: "5s", keys: keys{retry: time.Second}, queue: &admit.QueueResult{Reason: "full", RetryAfter: 2 * time.Second},
			status: 429, code: "upstream_keys_exhausted", retryAfter: 2 * time.Second, class: "fast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "ratelimit", tt.maxWait)
			a := &admit.Admitter{Keys: &tt.keys}
			var q *queue
			if tt.queue != nil {
				q = &queue{res: *tt.queue}
				a.Queue = q
			}
			f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
			f.Alias, f.Backends, f.EstTokens, f.MaxOut = "chat", []string{"big", "ant"}, 10, 5
			tm := &timer{class: "fast"}
			r := a.Wait(context.Background(), cfg, f, tm)
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && (!r.Retry || r.RetryAfter != tt.retryAfter) {
				t.Errorf("Retry-After %v (%v), want %v", r.RetryAfter, r.Retry, tt.retryAfter)
			}
			if tt.class != "" {
				if len(q.seen) != 1 {
					t.Fatalf("queue asked %d times", len(q.seen))
				}
				qr := q.seen[0]
				if qr.Class != tt.class || qr.Scope != "big,ant" || qr.Tokens != 15 || qr.Tenant != "alpha" || qr.Weight != 3 || qr.MaxWait != 3*time.Second {
					t.Errorf("queue request %+v", qr)
				}
			}
			if tt.queue != nil && tt.queue.Waited > 0 && (len(tm.extended) != 1 || tm.extended[0] != 3*time.Second+cfg.Request.MessageTimeout.Duration) {
				t.Errorf("timer extended %v", tm.extended)
			}
		})
	}
}

// pinnedKeys is a fake key pool that also checks one key: the backends
// serve, the pinned key is as key says.
type pinnedKeys struct {
	keys
	key   keys
	asked []string
}

func (k *pinnedKeys) KeyAvailable(backend, key string) (bool, time.Duration, bool) {
	k.asked = append(k.asked, backend+"/"+key)
	return k.key.ok, k.key.retry, k.key.failing
}

// A request pinned to the key holding its previous response waits for that
// key while it is out (its own queue scope, unpaced), not for any key of
// its backends, and goes the backends' paced way once it serves; its
// refusals name previous_response_id.
func TestWaitPinnedKey(t *testing.T) {
	tests := []struct {
		name    string
		maxWait string
		key     keys
		queue   *admit.QueueResult
		status  int
		code    string
	}{
		{name: "its key usable", maxWait: "5s", key: keys{ok: true}, queue: &admit.QueueResult{Admitted: true}},
		{name: "its key rests, no queue", maxWait: "0s", key: keys{retry: 3 * time.Second}, status: 429, code: "previous_response_key_unavailable"},
		{name: "its key rests, queued and admitted", maxWait: "5s", key: keys{retry: 3 * time.Second}, queue: &admit.QueueResult{Admitted: true}},
		{name: "its key rests, waited out", maxWait: "5s", key: keys{retry: 3 * time.Second},
			queue: &admit.QueueResult{Waited: 3 * time.Second, Reason: "timeout"}, status: 429, code: "previous_response_key_unavailable"},
		{name: "its key failing, not queued", maxWait: "5s", key: keys{failing: true, retry: time.Second}, queue: &admit.QueueResult{Admitted: true},
			status: 429, code: "previous_response_key_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "ratelimit", tt.maxWait)
			cfg.Admission.Pace = true
			ks := &pinnedKeys{keys: keys{ok: true}, key: tt.key}
			a := &admit.Admitter{Keys: ks}
			q := &queue{}
			if tt.queue != nil {
				q.res = *tt.queue
			}
			a.Queue = q
			f := facts(t, cfg, "/v1/responses", keyAlpha)
			f.Alias, f.Backends, f.Pinned = "chat", []string{"big"}, admit.ResponseOwner{Backend: "big", KeyID: "big-2", Tenant: "alpha"}
			r := a.Wait(context.Background(), cfg, f, &timer{})
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && r.Param != admit.ParamPreviousResponse {
				t.Errorf("refusal names %q, want %s", r.Param, admit.ParamPreviousResponse)
			}
			if len(ks.asked) == 0 || ks.asked[0] != "big/big-2" {
				t.Errorf("asked about %v, want the pinned key big/big-2", ks.asked)
			}
			switch {
			case tt.queue == nil || tt.key.ok || tt.key.failing || tt.maxWait == "0s":
				if len(q.seen) != 0 {
					t.Errorf("queued %+v", q.seen)
				}
			case len(q.seen) != 1 || q.seen[0].Scope != "pin:big/big-2":
				t.Errorf("queue requests %+v, want one in scope pin:big/big-2", q.seen)
			}
		})
	}
}

// pacedPinnedKeys also paces its backends.
type pacedPinnedKeys struct{ pinnedKeys }

func (k *pacedPinnedKeys) Pace([]string) admit.Rate { return admit.Rate{Requests: 10} }

// A pinned request is ordered and paced with its backends' requests like
// any other; one whose key rests first waits for that key in a scope of its
// own.
func TestWaitPinnedKeyServesPaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    keys
		scopes []string
	}{
		{"its key serves", keys{ok: true}, []string{"big"}},
		{"its key rests", keys{retry: 2 * time.Second}, []string{"pin:big/big-2", "big"}},
	} {
		for _, waited := range []time.Duration{0, time.Second} {
			t.Run(fmt.Sprintf("%s, waited %s", tc.name, waited), func(t *testing.T) {
				cfg := testConfig(t, "ratelimit", "5s")
				cfg.Admission.Pace = true
				ks := &pacedPinnedKeys{pinnedKeys{keys: keys{ok: true}, key: tc.key}}
				q := &queue{res: admit.QueueResult{Admitted: true, Waited: waited}}
				a := &admit.Admitter{Keys: ks, Queue: q}
				f := facts(t, cfg, "/v1/responses", keyAlpha)
				f.Alias, f.Backends, f.Pinned = "chat", []string{"big"}, admit.ResponseOwner{Backend: "big", KeyID: "big-2", Tenant: "alpha"}
				tm := &timer{}
				if r := a.Wait(context.Background(), cfg, f, tm); r != nil {
					t.Fatalf("refused: %+v", r)
				}
				// Envoy honours the first override per message (and so
				// does Timer): it covers the whole wait, both waits of a
				// pinned request.
				if waited > 0 && (len(tm.extended) == 0 || slices.Max(tm.extended) != tm.extended[0] ||
					tm.extended[0] != cfg.Admission.MaxWait.Duration+cfg.Request.MessageTimeout.Duration) {
					t.Errorf("timer extended %v, want the whole wait first", tm.extended)
				}
				var scopes []string
				for _, r := range q.seen {
					scopes = append(scopes, r.Scope)
				}
				if !slices.Equal(scopes, tc.scopes) {
					t.Errorf("queued in %v, want %v", scopes, tc.scopes)
				}
			})
		}
	}
}

func TestQueueSession(t *testing.T) {
	long := strings.Repeat("s", 200)
	tests := []struct {
		name, sticky, header, want string
	}{
		{name: "virtual key", want: "alpha/key/alpha-1"},
		{name: "session header", header: "run-7", want: "alpha/session/run-7"},
		{name: "sticky header first", sticky: "agent-3", header: "run-7", want: "alpha/session/agent-3"},
		{name: "long name hashed", header: long, want: "alpha/session/h:"},
		{name: "another tenant's key id is not a session", header: "key/beta-1", want: "alpha/session/key/beta-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "ratelimit", "5s")
			q := &queue{res: admit.QueueResult{Admitted: true}}
			a := &admit.Admitter{Keys: &keys{retry: time.Second}, Queue: q}
			f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
			f.Alias, f.Backends, f.EstTokens, f.MaxOut, f.Sticky = "chat", []string{"big"}, 10, 5, tt.sticky
			if r := a.Wait(context.Background(), cfg, f, &timer{session: tt.header}); r != nil {
				t.Fatalf("refused: %+v", r)
			}
			if len(q.seen) != 1 {
				t.Fatalf("queue asked %d times", len(q.seen))
			}
			got := q.seen[0].Session
			if !strings.HasPrefix(got, tt.want) || (tt.header == long && len(got) > 64) || (tt.header != long && got != tt.want) {
				t.Errorf("session %q, want %q", got, tt.want)
			}
		})
	}
}

// budgets is a fake budget store.
type budgets struct {
	st  admit.BudgetStatus
	err error
}

func (b budgets) Check(context.Context, string) (admit.BudgetStatus, error) { return b.st, b.err }

func TestBudget(t *testing.T) {
	tests := []struct {
		name, key, path, tokens string
		subkeys                 bool
		budgets                 admit.Budgets
		status                  int
		code                    string
	}{
		{name: "spent", key: keyCapped, path: "/v1/chat/completions", tokens: "ratelimit",
			budgets: budgets{st: admit.BudgetStatus{Exhausted: true, Limit: 10, RetryAfter: time.Hour}}, status: 429, code: "budget_exceeded"},
		{name: "room left", key: keyCapped, path: "/v1/chat/completions", tokens: "ratelimit", budgets: budgets{}},
		{name: "store down, fail closed", key: keyCapped, path: "/v1/chat/completions", tokens: "ratelimit",
			budgets: budgets{err: errors.New("redis")}, status: 503, code: "accounting_unavailable"},
		{name: "not capped", key: keyAlpha, path: "/v1/chat/completions", tokens: "ratelimit", budgets: budgets{st: admit.BudgetStatus{Exhausted: true}}},
		{name: "not billed", key: keyCapped, path: "/v1/messages/count_tokens", tokens: "ratelimit", budgets: budgets{st: admit.BudgetStatus{Exhausted: true}}},
		{name: "the reservation holds it", key: keyCapped, path: "/v1/chat/completions", tokens: "reserve", budgets: budgets{st: admit.BudgetStatus{Exhausted: true}}},
		{name: "ratelimit with sub-keys: the reservation holds it", key: keyCapped, path: "/v1/chat/completions", tokens: "ratelimit", subkeys: true,
			budgets: budgets{st: admit.BudgetStatus{Exhausted: true}}},
		{name: "no store", key: keyCapped, path: "/v1/chat/completions", tokens: "ratelimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.tokens, "0s")
			cfg.Subkeys.Enabled = tt.subkeys
			a := &admit.Admitter{Budgets: tt.budgets, Reserver: &reserver{}}
			failed := ""
			a.Failed = func(step string) { failed = step }
			r := a.Budget(context.Background(), cfg, facts(t, cfg, tt.path, tt.key))
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && r.Code == "budget_exceeded" && (r.RetryAfter != time.Hour || !strings.Contains(r.Message, "10.00 EUR")) {
				t.Errorf("refusal %+v", r)
			}
			if tt.code == "accounting_unavailable" && failed != "budget" {
				t.Errorf("failed step %q, want budget", failed)
			}
		})
	}
}

// reserver is a fake reserver answering its results in turn.
type reserver struct {
	res  []admit.Reservation
	err  error
	seen []admit.ReserveRequest
	left []admit.ReserveRequest
}

func (r *reserver) Reserve(_ context.Context, req admit.ReserveRequest) (admit.Reservation, error) {
	r.seen = append(r.seen, req)
	if r.err != nil {
		return admit.Reservation{}, r.err
	}
	res := r.res[0]
	if len(r.res) > 1 {
		r.res = r.res[1:]
	}
	return res, nil
}

func (r *reserver) Leave(_ context.Context, req admit.ReserveRequest) error {
	r.left = append(r.left, req)
	return nil
}

func TestReserve(t *testing.T) {
	tpm := admit.Reservation{Scope: "tenant", Limit: 1000, Remaining: 3, Reset: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond}
	tests := []struct {
		name    string
		tokens  string
		subkeys bool
		res     []admit.Reservation
		err     error
		status  int
		code    string
		headers []admit.Header
	}{
		{name: "granted", tokens: "reserve", res: []admit.Reservation{{ID: "r1", Granted: true}}},
		{name: "off", tokens: "ratelimit"},
		{name: "ratelimit with sub-keys: money only", tokens: "ratelimit", subkeys: true, res: []admit.Reservation{{ID: "r1", Granted: true}}},
		{name: "budget spent", tokens: "reserve", res: []admit.Reservation{{Budget: true, RetryAfter: time.Hour}}, status: 429, code: "budget_exceeded"},
		{name: "key budget spent", tokens: "reserve", res: []admit.Reservation{{Budget: true, BudgetKey: "alpha-1", BudgetPeriod: "day", RetryAfter: time.Hour}}, status: 429, code: "key_budget_exceeded"},
		{name: "tokens per minute", tokens: "reserve", res: []admit.Reservation{tpm}, status: 429, code: "rate_limit_exceeded",
			headers: []admit.Header{{Key: "x-ratelimit-limit-tokens", Value: "1000"}, {Key: "x-ratelimit-remaining-tokens", Value: "3"},
				{Key: "x-ratelimit-reset-tokens", Value: "1.5s"}}},
		{name: "store down", tokens: "reserve", err: errors.New("redis"), status: 503, code: "accounting_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.tokens, "0s")
			cfg.Subkeys.Enabled = tt.subkeys
			rs := &reserver{res: tt.res, err: tt.err}
			a := &admit.Admitter{Reserver: rs}
			f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
			f.Alias, f.Model, f.Backends, f.EstTokens, f.MaxOut = "chat", &cfg.Models[0], []string{"big", "ant"}, 40, 60
			r := a.Reserve(context.Background(), cfg, f, nil)
			wantRefusal(t, r, tt.status, tt.code)
			if r != nil && len(tt.headers) > 0 {
				if len(r.Headers) != len(tt.headers) || !r.Retry {
					t.Fatalf("headers %v, retry %v", r.Headers, r.Retry)
				}
				for i, h := range tt.headers {
					if r.Headers[i] != h {
						t.Errorf("header %d: %v, want %v", i, r.Headers[i], h)
					}
				}
			}
			if tt.tokens == "ratelimit" && !tt.subkeys {
				if len(rs.seen) != 0 || f.Reserved {
					t.Fatal("reserved with reservations off")
				}
				return
			}
			req := rs.seen[0]
			if req.PromptTokens != 40 || req.MaxOutputTokens != 60 || req.Tenant != "alpha" || req.KeyID != "alpha-1" || req.Price.OutputPerMTok != 15 {
				t.Errorf("reserve request %+v (the price must be the dearest target's)", req)
			}
			if f.Reserved != (r == nil) || (r == nil && f.Reservation.ID != "r1") {
				t.Errorf("reserved %v %+v", f.Reserved, f.Reservation)
			}
		})
	}
}

// The money hold is priced at the target whose worst case for this
// request is dearest, counting the output the reserver will hold: with no
// max output (an embeddings request) that is the default, not nothing.
func TestReservePricesTheDearestWorstCase(t *testing.T) {
	a := config.Price{InputPerMTok: 10, OutputPerMTok: 10}
	b := config.Price{InputPerMTok: 1, OutputPerMTok: 30}
	tests := []struct {
		name           string
		prompt, maxOut int
		want           config.Price
	}{
		{"long prompt, short answer", 100_000, 100, a},
		{"short prompt, long answer", 100, 100_000, b},
		// 40 tokens and the default 100: A 0.0014, B 0.00304.
		{"no max output: the default is held", 40, 0, b},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "reserve", "0s")
			cfg.Models[0].Targets[0].Price, cfg.Models[0].Targets[1].Price = a, b
			rs := &reserver{res: []admit.Reservation{{ID: "r1", Granted: true}}}
			f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
			f.Alias, f.Model, f.Backends, f.EstTokens, f.MaxOut = "chat", &cfg.Models[0], []string{"big", "ant"}, tc.prompt, tc.maxOut
			wantRefusal(t, (&admit.Admitter{Reserver: rs}).Reserve(context.Background(), cfg, f, nil), 0, "")
			if got := rs.seen[0]; got.Price != tc.want || got.PromptTokens != tc.prompt || got.MaxOutputTokens != tc.maxOut {
				t.Fatalf("reserve request %+v, want the price %+v", got, tc.want)
			}
		})
	}
}

// A key budget's refusal names whose budget is spent and its period; a run
// budget, which never resets, sends no Retry-After.
func TestKeyBudgetExceeded(t *testing.T) {
	for _, tc := range []struct {
		key   string
		res   admit.Reservation
		msg   string
		retry bool
	}{
		{"sk_a", admit.Reservation{BudgetKey: "sk_a", BudgetPeriod: "run"}, "This API key has used its lifetime budget.", false},
		{"sk_a", admit.Reservation{BudgetKey: "sk_a", BudgetPeriod: "day", RetryAfter: time.Hour}, "This API key has used its daily budget.", true},
		{"sk_a", admit.Reservation{BudgetKey: "sk_m", BudgetPeriod: "month", RetryAfter: time.Hour}, "This API key's parent key `sk_m` has used its monthly budget.", true},
	} {
		r := admit.KeyBudgetExceeded(tc.key, tc.res)
		if r.Status != 429 || r.Code != "key_budget_exceeded" || r.Type != "insufficient_quota" || r.Message != tc.msg || r.Retry != tc.retry {
			t.Errorf("%+v: %+v", tc.res, r)
		}
	}
}

// A TPM refusal whose window frees within the wait is queued per tenant
// and asked again.
func TestReserveWaitsForTheWindow(t *testing.T) {
	cfg := testConfig(t, "reserve", "5s")
	rs := &reserver{res: []admit.Reservation{{Scope: "model", RetryAfter: 10 * time.Millisecond}, {ID: "r2", Granted: true}}}
	q := &queue{res: admit.QueueResult{Admitted: true}}
	a := &admit.Admitter{Reserver: rs, Queue: q, Keys: &keys{ok: true}}
	f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
	f.Alias, f.Model, f.Backends = "chat", &cfg.Models[0], []string{"big"}
	if r := a.Admit(context.Background(), cfg, f, nil); r != nil {
		t.Fatalf("refused: %+v", r)
	}
	if !f.Admitted || f.Reservation.ID != "r2" || len(rs.seen) != 2 {
		t.Fatalf("admitted %v, reservation %+v, asked %d times", f.Admitted, f.Reservation, len(rs.seen))
	}
	if len(q.seen) != 1 || q.seen[0].Scope != "tpm:model:alpha:chat" {
		t.Errorf("queue requests %+v", q.seen)
	}
	if len(rs.left) != 0 {
		t.Errorf("an admitted waiter left the waiters: %+v", rs.left)
	}
}

// A TPM waiter whose wait ends without a reservation (the queue's bound,
// the client gone, a Retry-After beyond the wait) says so once, and is
// refused with the last refusal.
func TestReserveLeavesWhenTheWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry time.Duration
		queue admit.QueueResult
	}{
		{"the queue's bound", 10 * time.Millisecond, admit.QueueResult{Reason: "timeout"}},
		{"retry after beyond the wait", time.Minute, admit.QueueResult{Admitted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "reserve", "5s")
			rs := &reserver{res: []admit.Reservation{{Scope: "model", Limit: 1000, RetryAfter: tc.retry}}}
			a := &admit.Admitter{Reserver: rs, Queue: &queue{res: tc.queue}, Keys: &keys{ok: true}}
			f := facts(t, cfg, "/v1/chat/completions", keyAlpha)
			f.Alias, f.Model, f.Backends = "chat", &cfg.Models[0], []string{"big"}
			wantRefusal(t, a.Admit(context.Background(), cfg, f, nil), 429, "rate_limit_exceeded")
			if len(rs.left) != 1 || rs.left[0].RequestID != f.RequestID || rs.left[0].Tenant != "alpha" || rs.left[0].Model != "chat" {
				t.Errorf("left %+v, want the request once", rs.left)
			}
		})
	}
}

func TestStickyKey(t *testing.T) {
	cfg := testConfig(t, "ratelimit", "0s")
	long := strings.Repeat("s", 129)
	tests := []struct{ name, key, header, want string }{
		{"header", keyAlpha, "session-1", "session-1"},
		{"none", keyAlpha, "", ""},
		{"sticky tenant", keyCapped, "", "capped/capped-1"},
		{"header wins", keyCapped, "s", "s"},
		{"long hashed", keyAlpha, long, "h:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := facts(t, cfg, "/v1/chat/completions", tt.key)
			f.Sticky = tt.header
			got := f.StickyKey()
			if got != tt.want && !(strings.HasPrefix(tt.want, "h:") && strings.HasPrefix(got, "h:") && len(got) == 34) {
				t.Errorf("sticky %q, want %q", got, tt.want)
			}
		})
	}
}
