package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

func TestKeyLifecycle(t *testing.T) {
	e := startKeyAPI(t, nil)
	cfg := keyConfig(t)
	id, plain := e.create(t, testAdminToken, map[string]any{
		"tenant": "team-red", "limits": map[string]int{"rpm": 60}, "models": []string{"gpt-4o-mini"},
		"class": "bulk", "ttl": "24h", "labels": map[string]string{"run": "r1", "team": "red"},
		"budget": map[string]any{"amount": 5, "period": "run", "hard_cap": true, "alerts": []float64{50, 90}},
	})
	if !strings.HasPrefix(plain, "sk-sg-") || !strings.HasPrefix(id, "sk_") {
		t.Fatalf("created %q %q", id, plain)
	}
	if _, r := (subkey.Auth{Store: e.store}).Authenticate(cfg, plain); r != subkey.OK {
		t.Fatalf("the created key does not authenticate: %v", r)
	}
	other, _ := e.create(t, testAdminToken, map[string]any{"tenant": "team-blue", "labels": map[string]string{"run": "r1"}})

	show := e.do(t, http.MethodGet, "/v1/keys/"+id, testAdminToken, nil)
	k := show.key()
	if show.status != 200 || k["tenant"] != "team-red" || k["class"] != "bulk" || k["expires_at"] == nil ||
		k["limits"].(map[string]any)["rpm"] != 60.0 || k["budget"].(map[string]any)["period"] != "run" {
		t.Fatalf("show: %d %s", show.status, show.raw)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{id, other}},
		{"?tenant=team-red", []string{id}},
		{"?label=run=r1", []string{id, other}},
		{"?label=run=r1&label=team=red", []string{id}},
		{"?tenant=team-blue&label=team=red", nil},
	} {
		list := e.do(t, http.MethodGet, "/v1/keys"+tc.query, testAdminToken, nil)
		keys, _ := list.body["keys"].([]any)
		var got []string
		for _, k := range keys {
			got = append(got, k.(map[string]any)["id"].(string))
		}
		if list.status != 200 || !sameSet(got, tc.want) {
			t.Errorf("list%s: %d %v, want %v", tc.query, list.status, got, tc.want)
		}
	}

	if a := e.do(t, http.MethodPost, "/v1/keys/"+id+"/revoke", testAdminToken, nil); a.status != 200 || a.key()["revoked"] != true {
		t.Fatalf("revoke: %d %s", a.status, a.raw)
	}
	if _, r := (subkey.Auth{Store: e.store}).Authenticate(cfg, plain); r != subkey.Revoked {
		t.Fatalf("after revoke: %v", r)
	}
	if a := e.do(t, http.MethodDelete, "/v1/keys/"+other, testAdminToken, nil); a.status != 200 || a.key()["revoked"] != true {
		t.Fatalf("DELETE: %d %s", a.status, a.raw)
	}
	if a := e.do(t, http.MethodGet, "/v1/keys/sk_0000000000000000", testAdminToken, nil); a.status != 404 {
		t.Fatalf("unknown id: %d %s", a.status, a.raw)
	}
	if a := e.do(t, http.MethodDelete, "/v1/keys/sk_0000000000000000", testAdminToken, nil); a.status != 404 {
		t.Fatalf("revoke unknown id: %d %s", a.status, a.raw)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

// The plain key is in the create answer and nowhere else: not in any
// other answer, the log or the audit stream; neither is its hash.
func TestPlainKeyOnlyOnce(t *testing.T) {
	e := startKeyAPI(t, nil)
	id, plain := e.create(t, testAdminToken, map[string]any{"tenant": "team-red", "minter": true, "limits": map[string]int{"rpm": 10}})
	child, _ := e.create(t, plain, map[string]any{"labels": map[string]string{"run": "x"}})
	hash := config.HashKey(plain)
	var seen []string
	for _, a := range []answer{
		e.do(t, http.MethodGet, "/v1/keys/"+id, testAdminToken, nil),
		e.do(t, http.MethodGet, "/v1/keys", testAdminToken, nil),
		e.do(t, http.MethodGet, "/v1/keys", plain, nil),
		e.do(t, http.MethodPatch, "/v1/keys/"+id, testAdminToken, map[string]any{"labels": map[string]string{"a": "b"}}),
		e.do(t, http.MethodPost, "/v1/keys/"+child+"/revoke", plain, nil),
		e.do(t, http.MethodPost, "/v1/keys/"+id+"/revoke", testAdminToken, nil),
		e.do(t, http.MethodGet, "/v1/keys/audit", testAdminToken, nil),
	} {
		seen = append(seen, a.raw)
	}
	raw, err := e.rdb.XRange(context.Background(), "sg:audit", "-", "+").Result()
	if err != nil || len(raw) < 4 {
		t.Fatalf("audit stream: %v %d entries", err, len(raw))
	}
	for _, m := range raw {
		for _, v := range m.Values {
			seen = append(seen, v.(string))
		}
	}
	seen = append(seen, e.logs.String())
	hexHash := strings.TrimPrefix(hash, "sha256:")
	for _, s := range seen {
		if strings.Contains(s, plain) || strings.Contains(s, hexHash) || strings.Contains(s, testAdminToken) {
			t.Errorf("a secret or hash leaked into: %s", s)
		}
	}
}

// Every bad request is a 4xx naming the field, and creates nothing.
func TestCreateRefusesBadInput(t *testing.T) {
	e := startKeyAPI(t, nil)
	_, minterPlain := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true,
		Limits: config.Limits{RPM: 100, TPM: 1000}, Models: []string{"gpt-4o-mini"}, ExpiresAt: time.Now().Add(time.Hour)})
	before := len(e.store.List("", nil))
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name   string
		token  string
		body   string
		status int
		field  string
	}{
		{"duplicate label", testAdminToken, `{"tenant":"team-red","labels":{"team":"a","team":"b"}}`, 400, "labels.team"},
		{"duplicate member", testAdminToken, `{"tenant":"team-red","tenant":"team-blue"}`, 400, "tenant"},
		{"unknown tenant", testAdminToken, `{"tenant":"team-green"}`, 400, "tenant"},
		{"no tenant", testAdminToken, `{}`, 400, "tenant"},
		{"unknown model", testAdminToken, `{"tenant":"team-red","models":["gpt-9"]}`, 400, "models"},
		{"unknown class", testAdminToken, `{"tenant":"team-red","class":"vip"}`, 400, "class"},
		{"expiry in the past", testAdminToken, `{"tenant":"team-red","expires_at":"` + past + `"}`, 400, "expires_at"},
		{"expiry not a time", testAdminToken, `{"tenant":"team-red","expires_at":"tomorrow"}`, 400, "expires_at"},
		{"negative ttl", testAdminToken, `{"tenant":"team-red","ttl":-5}`, 400, "ttl"},
		{"bad ttl", testAdminToken, `{"tenant":"team-red","ttl":"soon"}`, 400, "ttl"},
		{"ttl and expires_at", testAdminToken, `{"tenant":"team-red","ttl":"1h","expires_at":"2099-01-01T00:00:00Z"}`, 400, "ttl"},
		{"negative limit", testAdminToken, `{"tenant":"team-red","limits":{"rpm":-1}}`, 400, "limits"},
		{"limit not a number", testAdminToken, `{"tenant":"team-red","limits":{"rpm":"many"}}`, 400, "limits.rpm"},
		{"unknown limit", testAdminToken, `{"tenant":"team-red","limits":{"rph":5}}`, 400, "limits.rph"},
		{"unknown field", testAdminToken, `{"tenant":"team-red","owner":"me"}`, 400, "owner"},
		{"client sets the parent", testAdminToken, `{"tenant":"team-red","parent":"sk_1"}`, 400, "parent"},
		{"client sets the hash", testAdminToken, `{"tenant":"team-red","hash":"sha256:00"}`, 400, "hash"},
		{"bad budget period", testAdminToken, `{"tenant":"team-red","budget":{"amount":1,"period":"week"}}`, 400, "budget.period"},
		{"budget without amount", testAdminToken, `{"tenant":"team-red","budget":{"period":"day"}}`, 400, "budget.amount"},
		{"unknown budget field", testAdminToken, `{"tenant":"team-red","budget":{"amount":1,"period":"day","soft":true}}`, 400, "budget.soft"},
		{"label not a string", testAdminToken, `{"tenant":"team-red","labels":{"n":1}}`, 400, "labels.n"},
		{"malformed JSON", testAdminToken, `{"tenant":"team-red",`, 400, ""},
		{"trailing data", testAdminToken, `{"tenant":"team-red"} {}`, 400, ""},
		{"not an object", testAdminToken, `["team-red"]`, 400, ""},
		{"empty body", testAdminToken, ``, 400, ""},
		{"body too large", testAdminToken, `{"tenant":"team-red","labels":{"x":"` + strings.Repeat("a", maxKeyBody) + `"}}`, 413, ""},
		{"too deep", testAdminToken, `{"labels":` + strings.Repeat(`{"a":`, 20) + `1` + strings.Repeat(`}`, 20) + `}`, 400, "labels.a.a.a.a.a.a.a.a"},
		{"minter above its limits", minterPlain, `{"limits":{"rpm":500}}`, 403, "limits.rpm"},
		{"minter unlimited", minterPlain, `{"limits":{"tpm":0}}`, 403, "limits.tpm"},
		{"minter other model", minterPlain, `{"models":["gpt-4o"]}`, 403, "models"},
		{"minter later expiry", minterPlain, `{"ttl":"48h"}`, 403, "expires_at"},
		{"minter other tenant", minterPlain, `{"tenant":"team-blue"}`, 403, "tenant"},
		{"minter mints a minter", minterPlain, `{"minter":true}`, 403, "minter"},
		{"minter unknown model", minterPlain, `{"models":["gpt-9"]}`, 400, "models"},
		{"minter past expiry", minterPlain, `{"expires_at":"` + past + `"}`, 400, "expires_at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(t, http.MethodPost, "/v1/keys", tc.token, tc.body)
			if a.status != tc.status || a.field() != tc.field || a.message() == "" {
				t.Fatalf("%d field %q, want %d %q: %s", a.status, a.field(), tc.status, tc.field, a.raw)
			}
			if _, ok := a.body["api_key"]; ok {
				t.Fatalf("a refused create answered a key: %s", a.raw)
			}
		})
	}
	if after := len(e.store.List("", nil)); after != before {
		t.Fatalf("refused creates stored %d keys", after-before)
	}
	stored, err := e.rdb.HLen(context.Background(), "sg:keys").Result()
	if err != nil || int(stored) != before {
		t.Fatalf("redis holds %d keys, want %d (%v)", stored, before, err)
	}
}

func mustCreate(t testing.TB, s *subkey.Store, k subkey.Key) (*subkey.Key, string) {
	t.Helper()
	created, plain, err := s.Create(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return created, plain
}

// A minter acts for its own tenant only, within its own rights; nothing
// in the request chooses its tenant.
func TestMinter(t *testing.T) {
	e := startKeyAPI(t, nil)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	m, mp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true, Class: "bulk",
		Limits: config.Limits{RPM: 100, TPM: 5000}, Models: []string{"gpt-4o-mini"}, ExpiresAt: exp})
	blue, _ := mustCreate(t, e.store, subkey.Key{Tenant: "team-blue"})
	_, plainKey := mustCreate(t, e.store, subkey.Key{Tenant: "team-red"})
	revokedMinter, rp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	if _, err := e.store.Revoke(context.Background(), revokedMinter.ID); err != nil {
		t.Fatal(err)
	}
	_, ep := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true, ExpiresAt: time.Now().Add(time.Millisecond)})
	time.Sleep(2 * time.Millisecond) // the minter above has expired

	// What the minter leaves out is its own.
	a := e.do(t, http.MethodPost, "/v1/keys", mp, `{"limits":{"rpm":10},"labels":{"run":"r7"}}`)
	k := a.key()
	if a.status != 201 || k["tenant"] != "team-red" || k["parent"] != m.ID || k["class"] != "bulk" ||
		k["limits"].(map[string]any)["tpm"] != 5000.0 || k["limits"].(map[string]any)["rpm"] != 10.0 || k["expires_at"] != exp.Format(time.RFC3339) {
		t.Fatalf("minted: %d %s", a.status, a.raw)
	}
	child := a.id()
	if b := e.do(t, http.MethodPost, "/v1/keys", mp, `{"tenant":"team-red","ttl":60,"limits":{"rpm":100,"tpm":10}}`); b.status != 201 {
		t.Fatalf("minting with its own tenant named: %d %s", b.status, b.raw)
	}

	for _, tc := range []struct {
		name, method, path, token string
		status                    int
	}{
		{"list own tenant", "GET", "/v1/keys", mp, 200},
		{"list own tenant by name", "GET", "/v1/keys?tenant=team-red", mp, 200},
		{"list other tenant", "GET", "/v1/keys?tenant=team-blue", mp, 403},
		{"show own", "GET", "/v1/keys/" + child, mp, 200},
		{"show other tenant's", "GET", "/v1/keys/" + blue.ID, mp, 403},
		{"revoke other tenant's", "POST", "/v1/keys/" + blue.ID + "/revoke", mp, 403},
		{"delete other tenant's", "DELETE", "/v1/keys/" + blue.ID, mp, 403},
		{"update", "PATCH", "/v1/keys/" + child, mp, 403},
		{"audit", "GET", "/v1/keys/audit", mp, 403},
		{"not a minter", "POST", "/v1/keys", plainKey, 403},
		{"not a minter lists", "GET", "/v1/keys", plainKey, 403},
		{"revoked minter", "POST", "/v1/keys", rp, 401},
		{"expired minter", "POST", "/v1/keys", ep, 401},
		{"config tenant key, not a minter", "POST", "/v1/keys", testSecrets["T_VIRTUAL_KEY"], 403},
		{"unknown key", "POST", "/v1/keys", "sk-sg-nope", 401},
		{"no credential", "POST", "/v1/keys", "", 401},
		{"no credential lists", "GET", "/v1/keys", "", 401},
		{"revoke own", "POST", "/v1/keys/" + child + "/revoke", mp, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(t, tc.method, tc.path, tc.token, `{"limits":{"rpm":1}}`)
			if a.status != tc.status {
				t.Fatalf("%d, want %d: %s", a.status, tc.status, a.raw)
			}
			if tc.status == 200 && strings.Contains(a.raw, "team-blue") {
				t.Fatalf("a minter of team-red sees team-blue: %s", a.raw)
			}
		})
	}
	if k, _ := e.store.Get(context.Background(), blue.ID); k.Revoked {
		t.Fatal("a minter revoked another tenant's key")
	}
	list := e.do(t, http.MethodGet, "/v1/keys", mp, nil)
	if n := len(list.body["keys"].([]any)); n != 6 {
		t.Fatalf("minter lists %d keys of team-red, want 6: %s", n, list.raw)
	}
}

func TestUpdate(t *testing.T) {
	e := startKeyAPI(t, nil)
	m, _ := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true, Limits: config.Limits{RPM: 100}})
	child, _ := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Parent: m.ID, Limits: config.Limits{RPM: 50, TPM: 7},
		Labels: map[string]string{"a": "1"}, ExpiresAt: time.Now().Add(time.Hour)})
	path := "/v1/keys/" + child.ID

	a := e.do(t, http.MethodPatch, path, testAdminToken, `{"limits":{"rpm":80},"labels":{"b":"2"},"ttl":"2h","budget":{"amount":3,"period":"day"}}`)
	k := a.key()
	lim := k["limits"].(map[string]any)
	if a.status != 200 || lim["rpm"] != 80.0 || lim["tpm"] != 7.0 || k["labels"].(map[string]any)["b"] != "2" || k["labels"].(map[string]any)["a"] != nil {
		t.Fatalf("update: %d %s", a.status, a.raw)
	}
	got, _ := e.store.Get(context.Background(), child.ID)
	if got.Budget == nil || got.Budget.Amount != 3 || got.ExpiresAt.Before(time.Now().Add(90*time.Minute)) {
		t.Fatalf("stored: %+v", got)
	}
	if a := e.do(t, http.MethodPatch, path, testAdminToken, `{"expires_at":null,"budget":null,"labels":null}`); a.status != 200 || a.key()["expires_at"] != nil || a.key()["budget"] != nil || a.key()["labels"] != nil {
		t.Fatalf("clearing: %d %s", a.status, a.raw)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"above the parent", `{"limits":{"rpm":500}}`, 400, "limits.rpm"},
		{"tenant is not updatable", `{"tenant":"team-blue"}`, 400, "tenant"},
		{"minter is not updatable", `{"minter":true}`, 400, "minter"},
		{"duplicate label", `{"labels":{"x":"1","x":"2"}}`, 400, "labels.x"},
		{"past expiry", `{"expires_at":"2001-01-01T00:00:00Z"}`, 400, "expires_at"},
		{"malformed", `{"limits":`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(t, http.MethodPatch, path, testAdminToken, tc.body)
			if a.status != tc.status || a.field() != tc.field {
				t.Fatalf("%d %q, want %d %q: %s", a.status, a.field(), tc.status, tc.field, a.raw)
			}
		})
	}
	if after, _ := e.store.Get(context.Background(), child.ID); after.Limits.RPM != 80 || after.Minter {
		t.Fatalf("a refused update changed the key: %+v", after)
	}
	if a := e.do(t, http.MethodPatch, "/v1/keys/sk_0000000000000000", testAdminToken, `{"labels":{}}`); a.status != 404 {
		t.Fatalf("unknown id: %d %s", a.status, a.raw)
	}
}

func TestAuditLog(t *testing.T) {
	e := startKeyAPI(t, nil)
	_, mp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true, Limits: config.Limits{RPM: 10}})
	id, _ := e.create(t, testAdminToken, map[string]any{"tenant": "team-blue"})
	e.do(t, http.MethodPost, "/v1/keys/"+id+"/revoke", mp, nil)       // refused: another tenant
	e.do(t, http.MethodPost, "/v1/keys", mp, `{"limits":{"rpm":99}}`) // refused: above its limit
	e.do(t, http.MethodPatch, "/v1/keys/"+id, testAdminToken, `{"labels":{"x":"y"}}`)
	e.do(t, http.MethodDelete, "/v1/keys/"+id, "sk-sg-wrong", nil) // refused: unknown key, logged only
	e.do(t, http.MethodDelete, "/v1/keys/"+id, testAdminToken, nil)

	a := e.do(t, http.MethodGet, "/v1/keys/audit?limit=10", testAdminToken, nil)
	entries, _ := a.body["entries"].([]any)
	if a.status != 200 || len(entries) != 5 {
		t.Fatalf("audit: %d %s", a.status, a.raw)
	}
	type row struct{ actor, action, key, tenant, outcome string }
	want := []row{ // newest first
		{"admin", "revoke", id, "team-blue", "allowed"},
		{"admin", "update", id, "team-blue", "allowed"},
		{"minter", "create", "", "team-red", "refused"},
		{"minter", "revoke", id, "team-red", "refused"},
		{"admin", "create", id, "team-blue", "allowed"},
	}
	for i, w := range want {
		en := entries[i].(map[string]any)
		actor := en["actor"].(string)
		if strings.HasPrefix(actor, "sk_") {
			actor = "minter"
		}
		got := row{actor, en["action"].(string), str(en["key_id"]), str(en["tenant"]), en["outcome"].(string)}
		if got != w || en["time"] == nil || en["status"] == nil {
			t.Errorf("entry %d: %+v, want %+v (%v)", i, got, w, en)
		}
	}
	if !strings.Contains(e.logs.String(), `"msg":"admin: key operation"`) || strings.Count(e.logs.String(), "key operation") != 6 ||
		!strings.Contains(e.logs.String(), `"actor":"unauthenticated","action":"revoke","key_id":"`+id+`"`) {
		t.Errorf("key operations not logged:\n%s", e.logs.String())
	}
	if a := e.do(t, http.MethodGet, "/v1/keys/audit?limit=x", testAdminToken, nil); a.status != 400 || a.field() != "limit" {
		t.Errorf("bad limit: %d %s", a.status, a.raw)
	}
}

func str(v any) string { s, _ := v.(string); return s }

// Without a store the key API says sub-keys are off; without admin.token
// it still needs a credential, so an open admin port changes nothing.
func TestKeyAPIAccess(t *testing.T) {
	off := startKeyAPI(t, func(o *Options) { o.SubKeys = nil })
	for _, m := range []string{"GET", "POST"} {
		if a := off.do(t, m, "/v1/keys", testAdminToken, `{}`); a.status != 501 || !strings.Contains(a.message(), "not enabled") {
			t.Errorf("%s without a store: %d %s", m, a.status, a.raw)
		}
	}

	open := startKeyAPI(t, func(o *Options) { o.Access = config.Admin{} })
	_, mp := mustCreate(t, open.store, subkey.Key{Tenant: "team-red", Minter: true})
	for _, tc := range []struct {
		method, token string
		status        int
	}{
		{"GET", "", 401},
		{"POST", "", 401},
		{"POST", testAdminToken, 401},
		{"POST", mp, 201},
	} {
		if a := open.do(t, tc.method, "/v1/keys", tc.token, `{"tenant":"team-red"}`); a.status != tc.status {
			t.Errorf("no admin.token, %s with %q: %d, want %d: %s", tc.method, tc.token, a.status, tc.status, a.raw)
		}
	}
	if a := open.do(t, "GET", "/config_dump", "", nil); a.status != 200 {
		t.Errorf("the read-only API stays open without admin.token: %d", a.status)
	}

	unresolved := startKeyAPI(t, func(o *Options) { o.Access = config.Admin{Token: config.SecretRef("env:T_ADMIN")} })
	_, up := mustCreate(t, unresolved.store, subkey.Key{Tenant: "team-red", Minter: true})
	if a := unresolved.do(t, "POST", "/v1/keys", testAdminToken, `{"tenant":"team-red"}`); a.status != 503 {
		t.Errorf("unresolved admin.token: %d %s", a.status, a.raw)
	}
	if a := unresolved.do(t, "POST", "/v1/keys", up, `{}`); a.status != 201 {
		t.Errorf("a minter with admin.token unresolved: %d %s", a.status, a.raw)
	}
}

// The key API's writes still pass the guard's Host and Origin checks, and
// only its own paths admit methods other than GET and HEAD.
func TestKeyAPIGuard(t *testing.T) {
	e := startKeyAPI(t, nil)
	auth := map[string]string{"Authorization": "Bearer " + testAdminToken}
	withOrigin := map[string]string{"Authorization": "Bearer " + testAdminToken, "Origin": "http://evil.example"}
	for _, tc := range []struct {
		name, method, path, host string
		hdr                      map[string]string
		status                   int
	}{
		{"cross-origin create", "POST", "/v1/keys", "", withOrigin, 403},
		{"rebound host", "POST", "/v1/keys", "evil.example", auth, 421},
		{"dot-dot out of the key API", "POST", "/v1/keys/../config_dump", "", auth, 405},
		{"POST elsewhere", "POST", "/config_dump", "", auth, 405},
		{"PUT on the key API", "PUT", "/v1/keys", "", auth, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, tc.method, e.URL+tc.path, tc.host, tc.hdr)
			if status != tc.status {
				t.Fatalf("%d, want %d: %s", status, tc.status, body)
			}
		})
	}
	if n := len(e.store.List("", nil)); n != 0 {
		t.Fatalf("%d keys created through a refused request", n)
	}
}

// A minter revoked in Redis is refused at once, even while this
// replica's cache has not heard of the revocation yet.
func TestMinterRevokedElsewhereIsRefused(t *testing.T) {
	e := startKeyAPI(t, nil)
	m, mp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	// The store refreshes m from its change message a moment later; a key
	// written after it by another replica's store is a barrier: once the
	// API's store has heard of that one, m's refresh is behind it.
	other := subkey.NewStore(e.rdb, "sg:", nil)
	_, barrier := mustCreate(t, other, subkey.Key{Tenant: "team-red"})
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, ok := e.store.Lookup(barrier); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API's store never heard of the barrier key")
		}
		time.Sleep(5 * time.Millisecond)
	}
	revoked := *m
	revoked.Revoked = true
	raw, err := json.Marshal(&revoked)
	if err != nil {
		t.Fatal(err)
	}
	// Written without the change announcement: the cache keeps the live key.
	if err := e.rdb.HSet(context.Background(), "sg:keys", m.ID, raw).Err(); err != nil {
		t.Fatal(err)
	}
	if k, ok := e.store.Lookup(mp); !ok || k.Revoked {
		t.Fatal("the cache already saw the revocation: the test proves nothing")
	}
	if a := e.do(t, http.MethodPost, "/v1/keys", mp, `{}`); a.status != 401 || !strings.Contains(a.message(), "revoked") {
		t.Fatalf("revoked minter: %d %s", a.status, a.raw)
	}
}

// TestConfigKeyMinter: a config-file key marked minter mints keys of its
// own tenant only, within the tenant's limits; one not marked is refused,
// and so is a revoked one.
func TestConfigKeyMinter(t *testing.T) {
	yaml := func(extra string) string {
		return strings.Replace(keyConfigYAML, "keys: [{id: red-1, secret: env:T_VIRTUAL_KEY}]",
			"keys: [{id: red-1, secret: env:T_VIRTUAL_KEY"+extra+"}]\n    limits: {rpm: 100}", 1)
	}
	for _, tc := range []struct {
		name, extra string
		status      int
	}{
		{"minter", ", minter: true", http.StatusCreated},
		{"not a minter", "", http.StatusForbidden},
		{"revoked minter", ", minter: true, revoked: true", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(yaml(tc.extra)), "admin-keys-test.yaml", config.Options{
				LookupEnv: func(k string) (string, bool) { v, ok := testSecrets[k]; return v, ok }})
			if err != nil {
				t.Fatal(err)
			}
			e := startKeyAPI(t, func(o *Options) { o.Config = func() *config.Config { return cfg } })
			plain := testSecrets["T_VIRTUAL_KEY"]
			a := e.do(t, http.MethodPost, "/v1/keys", plain, map[string]any{"labels": map[string]string{"run": "r1"}})
			if a.status != tc.status {
				t.Fatalf("mint: %d %s, want %d", a.status, a.raw, tc.status)
			}
			if a.status != http.StatusCreated {
				if keys := e.store.List("", nil); len(keys) != 0 {
					t.Errorf("%d keys created by a refused mint", len(keys))
				}
				return
			}
			k, err := e.store.Get(t.Context(), a.id())
			if err != nil {
				t.Fatal(err)
			}
			if k.Tenant != "team-red" || k.Parent != "red-1" || k.Limits.RPM != 100 {
				t.Errorf("minted %+v, want tenant team-red, parent red-1, the tenant's rpm 100", k)
			}
			for _, body := range []map[string]any{
				{"tenant": "team-blue"},                // another tenant
				{"limits": map[string]int{"rpm": 500}}, // above its own
			} {
				if a := e.do(t, http.MethodPost, "/v1/keys", plain, body); a.status != http.StatusForbidden {
					t.Errorf("mint %v: %d %s, want 403", body, a.status, a.raw)
				}
			}
		})
	}
}

// TestMinterMintedElsewhereWorksAtOnce: a minter key minted through
// another replica authenticates here at once, waiting for its change to
// arrive as the data path does: a planner's first mint with a fresh minter
// key may reach any replica before its announcement.
func TestMinterMintedElsewhereWorksAtOnce(t *testing.T) {
	e := startKeyAPI(t, nil)
	ctx := context.Background()
	// Written elsewhere, its announcement 100 ms late.
	m := subkey.Key{ID: "sk_late", Tenant: "team-red", Minter: true, CreatedAt: time.Now().UTC()}
	plain := "sk-sg-" + strings.Repeat("l", 43)
	m.Hash = config.HashKey(plain)
	raw, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, "sg:keys", m.ID, raw).Err(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { e.rdb.Publish(ctx, "sg:changed", m.ID) })
	if a := e.do(t, http.MethodPost, "/v1/keys", plain, `{}`); a.status != http.StatusCreated {
		t.Fatalf("fresh minter's first mint: %d %s", a.status, a.raw)
	}
}
