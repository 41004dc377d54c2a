package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/subkey/subkeytest"
)

// keyConfigYAML is the admin test config with a second model, so that a
// minter's model list can be narrower than its tenant's.
var keyConfigYAML = strings.Replace(testConfigYAML, "admission:", `  - name: gpt-4o
    targets: [{backend: relay-a, price: {input_per_mtok: 2.5, output_per_mtok: 10}}]
admission:`, 1)

func keyConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(keyConfigYAML), "admin-keys-test.yaml", config.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := testSecrets[k]; return v, ok },
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// keyEnv is an admin server with the key API over a real redis-server.
type keyEnv struct {
	URL    string
	store  *subkey.Store
	rdb    *redis.Client
	logs   *logbuf.Buffer
	client *http.Client
}

// startKeyAPI runs a sub-key store on its own redis-server and an admin
// server on a porttest port; change may adjust the options.
func startKeyAPI(t testing.TB, change func(*Options)) *keyEnv {
	t.Helper()
	cfg := keyConfig(t)
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	store := subkeytest.Run(t, rdb, "sg:")
	logs := &logbuf.Buffer{}
	opts := Options{
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config:  func() *config.Config { return cfg },
		Access:  config.Admin{Token: config.SecretFromValue("env:T_ADMIN", testAdminToken)},
		SubKeys: store,
	}
	if change != nil {
		change(&opts)
	}
	lis, err := net.Listen("tcp", porttest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(opts).Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &keyEnv{URL: "http://" + lis.Addr().String(), store: store, rdb: rdb, logs: logs,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}}
}

// answer is one key API response.
type answer struct {
	status int
	raw    string
	body   map[string]any
}

// field is the "field" of an error answer.
func (a answer) field() string {
	e, _ := a.body["error"].(map[string]any)
	f, _ := e["field"].(string)
	return f
}

func (a answer) message() string {
	e, _ := a.body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// key is the "key" object of an answer.
func (a answer) key() map[string]any {
	k, _ := a.body["key"].(map[string]any)
	return k
}

func (a answer) id() string { s, _ := a.key()["id"].(string); return s }

// do sends method path with body (a string, or nil) and the bearer token.
func (e *keyEnv) do(t testing.TB, method, path, token string, body any) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// create creates a key as token and fails the test unless it is created.
func (e *keyEnv) create(t testing.TB, token string, body any) (id, plain string) {
	t.Helper()
	a := e.do(t, http.MethodPost, "/v1/keys", token, body)
	if a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	plain, _ = a.body["api_key"].(string)
	return a.id(), plain
}
