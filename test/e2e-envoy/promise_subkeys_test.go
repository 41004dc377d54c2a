package e2eenvoy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/internal/gatewaytest"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// subkeysConfig turns sub-keys on under a tenant without limits of its own
// (only a sub-key's limits can refuse), tokens in the default reserve mode;
// the tenant's config key is the parent the tests mint under.
const subkeysConfig = `
subkeys:
  enabled: true
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    auth: bearer
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, price: {input_per_mtok: 1, output_per_mtok: 2}}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseSubkeys: a sub-key minted at run time works through Envoy,
// its requests are billed to it, and once revoked its next request is
// refused 401 key_revoked by every ext_proc replica within a second. Envoy
// dials one replica (the whole gateway); two more ext_proc-only replicas
// on the same Redis are asked directly, as Envoy would ask them.
func TestPromiseSubkeys(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: subkeysConfig,
			relays: []relaySpec{{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}}}})
		replicas := []*extprocReplica{s.extprocReplica("e2e-replica-2"), s.extprocReplica("e2e-replica-3")}
		ctx := testCtx(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.redis})
		t.Cleanup(func() { _ = rdb.Close() })
		// The store the key API writes through (another process's).
		store := subkey.NewStore(rdb, "sg:subkey:", nil)
		labels := map[string]string{"run": "nightly-7", "agent": "planner"}
		k, plain, err := store.Create(ctx, subkey.Key{Tenant: "team", Parent: "team-1", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}

		t.Run("works through Envoy and is billed to the sub-key", func(t *testing.T) {
			var resp *http.Response
			c := s.client(plain)
			eventually(ctx, t, "the new sub-key accepted", func() (bool, string) {
				_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("minted")}}, option.WithResponseInto(&resp))
				return err == nil, fmt.Sprint(err)
			})
			id := resp.Header.Get("x-request-id")
			var entry struct {
				VirtualKeyID string            `json:"virtual_key_id"`
				Labels       map[string]string `json:"labels"`
				Tenant       string            `json:"tenant"`
			}
			eventually(ctx, t, "the ledger entry", func() (bool, string) {
				status, body, err := get(ctx, s.adminURL+"/usage?request_id="+id, "")
				if err != nil || status != http.StatusOK {
					return false, fmt.Sprintf("%d %s %v", status, body, err)
				}
				return json.Unmarshal([]byte(body), &entry) == nil, body
			})
			if entry.Tenant != "team" || entry.VirtualKeyID != k.ID || !maps.Equal(entry.Labels, labels) {
				t.Errorf("ledger entry %+v, want tenant team, key %s, labels %v", entry, k.ID, labels)
			}
			for _, rp := range replicas {
				if status, code := rp.authenticate(t, plain); status != 0 {
					t.Errorf("%s refused the sub-key: %d %s", rp.name, status, code)
				}
			}
		})

		t.Run("revoked on every replica within 1s", func(t *testing.T) {
			if _, err := store.Revoke(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			revoked := time.Now()
			checks := []struct {
				name  string
				check func() (int, string)
			}{{"envoy", func() (int, string) { return s.chatRefusal(ctx, plain) }}}
			for _, rp := range replicas {
				checks = append(checks, struct {
					name  string
					check func() (int, string)
				}{rp.name, func() (int, string) { return rp.authenticate(t, plain) }})
			}
			for _, c := range checks {
				for {
					status, code := c.check()
					if status == http.StatusUnauthorized && code == "key_revoked" {
						t.Logf("%s: refused %v after the revocation", c.name, time.Since(revoked))
						break
					}
					if time.Since(revoked) > time.Second {
						t.Fatalf("%s: still %d %q 1s after the revocation", c.name, status, code)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			// Anthropic's clients get the same refusal in their shape.
			ac := s.anthropicClient(plain)
			_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 16,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("after revocation"))}})
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || ae.Type() != "authentication_error" ||
				!strings.Contains(ae.RawJSON(), `"code":"key_revoked"`) {
				t.Errorf("Anthropic client: %v, want 401 authentication_error key_revoked", err)
			}
		})
	})
}

// chatRefusal sends one chat request through Envoy with key and returns
// the refusal's status and code (0, "" when it was served).
func (s *pstack) chatRefusal(ctx context.Context, key string) (int, string) {
	_, err := s.chat(ctx, key, "gpt-4o-mini", "after revocation")
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode, apiErr.Code
	}
	return 0, fmt.Sprint(err)
}

// extprocReplica is an ext_proc-only gateway on the stack's Redis and
// config, listening on its own port.
type extprocReplica struct {
	name string
	conn *grpc.ClientConn
}

// extprocReplica starts one more ext_proc replica: the stack's config
// file with its own listen.extproc. It is ready only once its sub-keys
// are loaded.
func (s *pstack) extprocReplica(name string) *extprocReplica {
	t := s.t
	t.Helper()
	data, err := os.ReadFile(s.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := freeAddr(t)
	own := strings.Replace(string(data), "  extproc: "+s.ports.ExtProc+"\n", "  extproc: "+addr+"\n", 1)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	gatewaytest.Start(t, gateway.Options{Roles: gateway.Roles{ExtProc: true}, ConfigPath: path, NodeID: name, Version: "e2e",
		Load:   config.Options{LookupEnv: lookupSecret},
		Logger: gatewaytest.Logger(t, slog.LevelWarn)})
	waitDial(t, addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &extprocReplica{name: name, conn: conn}
}

// authenticate opens a router-level stream as Envoy does and sends the
// request headers of a chat request with key: the status and code of the
// local reply, or 0 when the replica let the headers through.
func (rp *extprocReplica) authenticate(t *testing.T, key string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, contract.GRPCRoleHeader, contract.RoleRouter)
	st, err := extprocv3.NewExternalProcessorClient(rp.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hm corev3.HeaderMap
	for _, kv := range [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gw"},
		{"authorization", "Bearer " + key}, {"content-type", "application/json"}} {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &hm}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ir := resp.GetImmediateResponse()
	if ir == nil {
		return 0, ""
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(ir.GetBody(), &e)
	return int(ir.GetStatus().GetCode()), e.Error.Code
}
