package e2eenvoy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

const rotationConfig = `
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: file:{keyFile}}
models:
  - name: gpt-4o-mini
    targets: [{backend: relay-a}]
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseSecretFileRotated: a provider key read from a file: secret is
// rotated in place (the file replaced, the config untouched, as a secrets
// manager or a Secret volume does). The gateway sends the new key from the
// next requests on, through Envoy, with no config edit or restart; before,
// it kept sending the revoked one until the config file itself changed.
func TestPromiseSecretFileRotated(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		keyFile := filepath.Join(t.TempDir(), "relay-a.key")
		writeKey := func(v string) {
			t.Helper()
			tmp := keyFile + ".tmp"
			if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, keyFile); err != nil {
				t.Fatal(err)
			}
		}
		writeKey(relaySecrets["P_A1"])
		body := strings.Replace(rotationConfig, "{keyFile}", keyFile, 1)
		// The relay knows both secrets: the old one as pa-1, the new as pa-2.
		s := startPStack(t, r, pstackOptions{body: body, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1", "pa-2": "P_A2"}},
		}})
		ctx := testCtx(t)
		lastKey := func() (string, int) {
			recs := s.relays["relay-a"].Requests()
			if len(recs) == 0 {
				return "", 0
			}
			return recs[len(recs)-1].KeyID, recs[len(recs)-1].Status
		}
		if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "before"); err != nil {
			t.Fatal(err)
		}
		if k, st := lastKey(); k != "pa-1" || st != http.StatusOK {
			t.Fatalf("before the rotation the relay saw key %q (status %d), want pa-1", k, st)
		}
		writeKey(relaySecrets["P_A2"])
		eventually(ctx, t, "the rotated key sent", func() (bool, string) {
			if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "after"); err != nil {
				return false, err.Error()
			}
			k, st := lastKey()
			return k == "pa-2" && st == http.StatusOK, fmt.Sprintf("relay saw key %q, status %d", k, st)
		})
	})
}
