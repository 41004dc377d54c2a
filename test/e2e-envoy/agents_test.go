package e2eenvoy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// The real agents, as people run them, through the real Envoy: Claude Code
// (`claude -p`) and Codex (`codex exec`), pinned by scripts/agents.sh, each
// on a backend speaking its API natively and on a chat completions relay
// (translated). The mock providers script one tool call the agent can run
// (a shell command writing proof.txt) and answer its result with text, so
// the agent finishes the task: the test checks the file, the final text
// and what each provider saw.

// Upstream keys of the agents' stack.
var agentUpstreamKeys = map[string]string{"AG_RELAY": "relay-secret", "AG_ANT": "ant-secret", "AG_OAI": "oai-secret"}

// startSwarmgateWith resolves upstream secrets from upstreamKeys.
func init() {
	for k, v := range agentUpstreamKeys {
		upstreamKeys[k] = v
	}
}

// finalText is what the mocks answer after the tool result (7 tokens).
const finalText = "Mock reply from the fake upstream,"

type agentStack struct {
	*stack
	relay, ant, oai *mockupstream.Server
}

// startAgentStack runs the gateway and Envoy with three providers: a chat
// completions relay, an Anthropic provider and an OpenAI provider that
// speaks the Responses API. claude-native and codex-native are served
// natively, claude-relay and codex-relay only by the relay.
func startAgentStack(t *testing.T, r envoytest.Release, script map[string]string) *agentStack {
	t.Helper()
	as := &agentStack{}
	start := func(ctx context.Context, auth config.AuthStyle, env string) *mockupstream.Server {
		m := mockupstream.New(mockupstream.Options{Auth: auth, Keys: []mockupstream.Key{{ID: strings.ToLower(env), Value: agentUpstreamKeys[env]}},
			CompletionTokens: 7, ToolScript: script, RecordBodies: true})
		if _, err := m.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	as.stack = startSwarmgateWith(t, func(s *stack, p Ports) string {
		as.relay = start(ctx, config.AuthBearer, "AG_RELAY")
		as.ant = start(ctx, config.AuthXAPIKey, "AG_ANT")
		as.oai = start(ctx, config.AuthBearer, "AG_OAI")
		return fmt.Sprintf(`
listen: {xds: %s, extproc: %s, ratelimit: %s, admin: %s}
envoy: {listener_address: 127.0.0.1, listener_port: %d}
redis: {addrs: [%s]}
request: {message_timeout: 5s}
backends:
  - {name: relay, base_url: "http://%s/v1", families: [chat_completions], keys: [{id: ag_relay, secret: env:AG_RELAY}]}
  - {name: ant, base_url: "http://%s/v1", api_style: anthropic, auth: x-api-key, keys: [{id: ag_ant, secret: env:AG_ANT}]}
  - {name: oai, base_url: "http://%s/v1", families: [chat_completions, responses], keys: [{id: ag_oai, secret: env:AG_OAI}]}
models:
  - {name: claude-native, targets: [{backend: ant}]}
  - {name: claude-relay, targets: [{backend: relay}]}
  - {name: codex-native, targets: [{backend: oai}]}
  - {name: codex-relay, targets: [{backend: relay}]}
tenants:
  - {name: team, models: ["*"], keys: [{id: team-1, hash: %s}], limits: {rpm: 10000, tpm: 100000000}}
`, p.XDS, p.ExtProc, p.RateLimit, p.Admin, p.EnvoyPort, p.Redis, as.relay.Addr(), as.ant.Addr(), as.oai.Addr(), config.HashKey(keyTeam))
	})
	startEnvoy(t, r.Path, as.bootstrapPath)
	as.waitRoutedModel(t, "claude-native")
	return as
}

// waitRoutedModel is waitRouted for a stack without the standard models.
func (s *stack) waitRoutedModel(t *testing.T, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		status, body, err := get(ctx, s.envoyAdmin+"/ready", "")
		if err == nil && status == 200 {
			status, body, err = get(ctx, s.envoyURL+"/v1/models", keyTeam)
			if err == nil && status == 200 && strings.Contains(body, model) {
				return
			}
		}
		last = fmt.Sprintf("status %d, body %.200q, err %v", status, body, err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Envoy did not route within 30s: last %s", last)
}

var (
	agentsOnce sync.Once
	agentsErr  error
	agentsDir  string // the checkout's root
)

// agentBin is the pinned agent CLI, installed by scripts/agents.sh on first
// use (a binary that cannot be had fails the test).
func agentBin(t *testing.T, name string) string {
	t.Helper()
	agentsOnce.Do(func() {
		agentsDir, agentsErr = repoRoot()
		if agentsErr != nil {
			return
		}
		cmd := exec.Command("bash", filepath.Join(agentsDir, "scripts", "agents.sh"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		agentsErr = cmd.Run()
	})
	if agentsErr != nil {
		t.Fatalf("installing the agent CLIs (scripts/agents.sh): %v", agentsErr)
	}
	out, err := exec.Command("bash", filepath.Join(agentsDir, "scripts", "agents.sh"), "bin", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// agentEnv is the environment an agent runs in: a fresh HOME, the gateway
// as its only reachable server (any other host goes to a dead proxy), no
// telemetry, updates or error reports.
func agentEnv(home string, extra ...string) []string {
	env := []string{
		"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TERM=dumb", "LANG=C.UTF-8",
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "http_proxy=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
	return append(env, extra...)
}

// runAgent runs an agent CLI in dir until it exits (at most 2 minutes) and
// returns its output.
func runAgent(t *testing.T, dir string, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s ran %v", filepath.Base(bin), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// captureFixtures writes the bodies a provider received to
// $SWARMGATE_CAPTURE_AGENT_FIXTURES/<name>-<n>.json when that is set: how
// the agents' real requests under extproc/translate/*/testdata were
// captured (run the test natively, then copy a body into a golden case).
func captureFixtures(t *testing.T, name string, m *mockupstream.Server) {
	dir := os.Getenv("SWARMGATE_CAPTURE_AGENT_FIXTURES")
	if dir == "" {
		return
	}
	for i, r := range m.Requests() {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, i)), r.Body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// relayBodies are the request bodies the relay received.
func relayBodies(m *mockupstream.Server) []string {
	var out []string
	for _, r := range m.Requests() {
		out = append(out, string(r.Body))
	}
	return out
}

// checkFinished: the agent ran the scripted command (proof.txt holds what
// it echoed), printed the final answer, and the provider that served the
// model answered one tool call and then a request carrying its result;
// the other provider saw nothing.
func checkFinished(t *testing.T, dir, out, proof string, served, idle *mockupstream.Server, endpoint string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "proof.txt"))
	if err != nil || strings.TrimSpace(string(b)) != proof {
		t.Errorf("proof.txt: %q, %v (want %q: the tool call did not run)", b, err, proof)
	}
	if !strings.Contains(out, finalText) {
		t.Errorf("the agent's output lacks the final answer %q:\n%s", finalText, out)
	}
	calls, results := 0, 0
	for _, r := range served.Requests() {
		if r.Endpoint != endpoint || r.Status != 200 {
			continue
		}
		calls += r.ToolCalls
		if r.ToolResults > 0 {
			results++
		}
	}
	if calls < 1 || results < 1 {
		t.Errorf("provider answered %d tool calls and %d requests with a tool result on %s; records: %+v", calls, results, endpoint, served.Requests())
	}
	if n := idle.Total().Requests; n != 0 {
		t.Errorf("the other provider saw %d requests", n)
	}
}

// TestClaudeCodeThroughEnvoy: Claude Code completes a task with a tool
// call, on an Anthropic provider (native) and on a chat completions relay
// (Messages translated to chat, its system turn inside messages included).
func TestClaudeCodeThroughEnvoy(t *testing.T) {
	claude := agentBin(t, "claude")
	script := map[string]string{"Bash": `{"command":"echo swarmgate-claude > proof.txt","description":"Write the proof file"}`}
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, script)
		for _, tc := range []struct {
			model, endpoint string
			served, idle    *mockupstream.Server
		}{
			{"claude-native", "messages", s.ant, s.relay},
			{"claude-relay", "chat", s.relay, s.ant},
		} {
			t.Run(tc.model, func(t *testing.T) {
				tc.served.ResetRecords()
				tc.idle.ResetRecords()
				home, dir := t.TempDir(), t.TempDir()
				env := agentEnv(home, "ANTHROPIC_BASE_URL="+s.envoyURL, "ANTHROPIC_API_KEY="+keyTeam,
					"ANTHROPIC_MODEL="+tc.model, "ANTHROPIC_SMALL_FAST_MODEL="+tc.model, "ANTHROPIC_DEFAULT_HAIKU_MODEL="+tc.model,
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1")
				out := runAgent(t, dir, env, claude, "-p", "Write the proof file.", "--model", tc.model,
					"--allowedTools", "Bash", "--output-format", "text", "--max-turns", "4")
				checkFinished(t, dir, out, "swarmgate-claude", tc.served, tc.idle, tc.endpoint)
				captureFixtures(t, "claude-"+r.Version+"-"+tc.model, tc.served)
				if tc.model == "claude-relay" {
					// Claude Code's system turn inside messages reached the
					// relay as a system message after the first user turn.
					bodies := relayBodies(tc.served)
					if len(bodies) == 0 || !strings.Contains(bodies[0], `"role":"user"`) ||
						!strings.Contains(bodies[0][strings.Index(bodies[0], `"role":"user"`):], `{"role":"system","content":"# Environment`) {
						t.Errorf("the relay's first request has no system message after the user turn: %.600s", bodies)
					}
				}
			})
		}
	})
}

// TestCodexThroughEnvoy: Codex with its default tools (a namespace tool
// and the hosted web_search among them) completes a task with a tool call,
// on a provider speaking the Responses API and on a chat completions relay
// (Responses translated to chat; web_search dropped by the default
// hosted_tools policy, the namespace flattened).
func TestCodexThroughEnvoy(t *testing.T) {
	codex := agentBin(t, "codex")
	script := map[string]string{"exec_command": `{"cmd":"echo swarmgate-codex > proof.txt"}`}
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, script)
		for _, tc := range []struct {
			model, endpoint string
			served, idle    *mockupstream.Server
		}{
			{"codex-native", "responses", s.oai, s.relay},
			{"codex-relay", "chat", s.relay, s.oai},
		} {
			t.Run(tc.model, func(t *testing.T) {
				tc.served.ResetRecords()
				tc.idle.ResetRecords()
				home, dir := t.TempDir(), t.TempDir()
				codexHome := filepath.Join(home, ".codex")
				if err := os.MkdirAll(codexHome, 0o700); err != nil {
					t.Fatal(err)
				}
				cfg := codexConfig(tc.model, s.envoyURL)
				if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
				env := agentEnv(home, "CODEX_HOME="+codexHome, "SWARMGATE_KEY="+keyTeam)
				out := runAgent(t, dir, env, codex, "exec", "--skip-git-repo-check", "-s", "danger-full-access", "Write the proof file.")
				checkFinished(t, dir, out, "swarmgate-codex", tc.served, tc.idle, tc.endpoint)
				captureFixtures(t, "codex-"+r.Version+"-"+tc.model, tc.served)
				if tc.model == "codex-relay" {
					// The namespace tool arrived flattened, web_search not at all.
					for i, b := range relayBodies(tc.served) {
						if !strings.Contains(b, `"name":"multi_agent_v1__`) || strings.Contains(b, `"web_search"`) {
							t.Errorf("relay request %d: namespace not flattened or web_search kept: %.400s", i, b)
						}
					}
				}
			})
		}
	})
}

// TestHostedToolsDroppedThroughEnvoy: Codex's real first request (the
// golden fixture), sent to a model served only by a chat completions
// relay, is answered 200 with the dropped hosted tool named in
// x-swarmgate-dropped-tools and counted in the gateway's metrics; a model
// with a native Responses backend gets it whole, without the header.
func TestHostedToolsDroppedThroughEnvoy(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(root, "extproc/translate/responseschat/testdata/responses_to_chat_completions/codex_first_turn/request.in.json"))
	if err != nil {
		t.Fatal(err)
	}
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, map[string]string{"exec_command": `{"cmd":"true"}`})
		ctx := testCtx(t)
		for _, tc := range []struct{ model, dropped string }{{"codex-relay", "web_search"}, {"codex-native", ""}} {
			b := bytes.Replace(body, []byte(`"model": "gpt-relay"`), []byte(`"model": "`+tc.model+`"`), 1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.envoyURL+"/v1/responses", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+keyTeam)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), "response.completed") {
				t.Fatalf("%s: status %d: %.500s", tc.model, resp.StatusCode, out)
			}
			if got := resp.Header.Get(contract.HeaderDroppedTools); got != tc.dropped {
				t.Errorf("%s: %s = %q, want %q", tc.model, contract.HeaderDroppedTools, got, tc.dropped)
			}
		}
		status, metrics, err := get(ctx, s.adminURL+"/metrics", "")
		if err != nil || status != http.StatusOK {
			t.Fatalf("/metrics: %d %v", status, err)
		}
		if want := `swarmgate_extproc_dropped_tools_total{backend="relay",tool="web_search"} 1`; !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	})
}

// TestCodexNamespacedToolThroughEnvoy: a call of a function of Codex's
// namespace tool (multi_agent_v1's close_agent) reaches Codex as the
// namespaced call it declared: natively, and from a chat completions relay
// that knew it as multi_agent_v1__close_agent. Codex runs it (its
// sub-agent manager answers for the unknown agent) and sends the call back
// with its namespace, which the relay gets under the same flattened name.
func TestCodexNamespacedToolThroughEnvoy(t *testing.T) {
	codex := agentBin(t, "codex")
	const args = `{"target":"agent-that-does-not-exist"}`
	// The Responses provider sees the namespace, the relay the flat name.
	script := map[string]string{"multi_agent_v1.close_agent": args, "multi_agent_v1__close_agent": args}
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, script)
		for _, tc := range []struct {
			model    string
			served   *mockupstream.Server
			endpoint string
		}{{"codex-native", s.oai, "responses"}, {"codex-relay", s.relay, "chat"}} {
			t.Run(tc.model, func(t *testing.T) {
				tc.served.ResetRecords()
				home, dir := t.TempDir(), t.TempDir()
				codexHome := filepath.Join(home, ".codex")
				if err := os.MkdirAll(codexHome, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig(tc.model, s.envoyURL)), 0o600); err != nil {
					t.Fatal(err)
				}
				out := runAgent(t, dir, agentEnv(home, "CODEX_HOME="+codexHome, "SWARMGATE_KEY="+keyTeam), codex,
					"exec", "--skip-git-repo-check", "-s", "danger-full-access", "Close the helper agent.")
				if !strings.Contains(out, finalText) {
					t.Errorf("no final answer:\n%s", out)
				}
				bodies := relayBodies(tc.served)
				if len(bodies) < 2 {
					t.Fatalf("%s saw %d requests: the call was not run", tc.model, len(bodies))
				}
				last := bodies[len(bodies)-1]
				want := `"namespace":"multi_agent_v1"`
				if tc.endpoint == "chat" {
					want = `"function":{"name":"multi_agent_v1__close_agent"`
				}
				if !strings.Contains(last, want) {
					t.Errorf("the call did not come back as %s: %.3000s", want, last[max(0, len(last)-3000):])
				}
				i := strings.LastIndex(last, "call_output")
				if tc.endpoint == "chat" {
					i = strings.LastIndex(last, `"role":"tool"`)
				}
				// Codex's own close_agent ran (and named the agent it could
				// not find); a call it did not recognise as its namespaced
				// tool is answered "unsupported call: <name>".
				answer := last[max(0, i):]
				if j := strings.Index(answer, "}"); j > 0 {
					answer = answer[:j]
				}
				if !strings.Contains(answer, "agent-that-does-not-exist") || strings.Contains(answer, "unsupported call") {
					t.Errorf("Codex did not run its namespaced close_agent; it answered: %s", answer)
				}
			})
		}
	})
}

// codexConfig is a CODEX_HOME/config.toml pointing Codex at the gateway as
// a custom Responses provider whose key is in $SWARMGATE_KEY.
func codexConfig(model, gateway string) string {
	return fmt.Sprintf(`model = %q
model_provider = "swarmgate"
check_for_update_on_startup = false

[model_providers.swarmgate]
name = "swarmgate"
base_url = "%s/v1"
env_key = "SWARMGATE_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`, model, gateway)
}
