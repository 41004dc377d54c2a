package e2eenvoy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// The official Python SDKs (openai, anthropic; pinned by
// scripts/pyclients.sh) as clients of the real Envoy, beside openai-go and
// anthropic-sdk-go: a chat completion and an Anthropic message, each as
// JSON and as a stream, on a backend speaking the API natively and (for
// Messages) on a chat completions relay.

var (
	pyOnce sync.Once
	pyBin  string
	pyErr  error
)

// python is the venv's interpreter, installed on first use.
func python(t *testing.T) string {
	t.Helper()
	pyOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			pyErr = err
			return
		}
		script := filepath.Join(root, "scripts", "pyclients.sh")
		cmd := exec.Command("bash", script)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if pyErr = cmd.Run(); pyErr != nil {
			return
		}
		out, err := exec.Command("bash", script, "python").Output()
		pyBin, pyErr = strings.TrimSpace(string(out)), err
	})
	if pyErr != nil {
		t.Fatalf("installing the Python SDKs (scripts/pyclients.sh): %v", pyErr)
	}
	return pyBin
}

// pyClients drives both SDKs and prints one JSON line of what they got.
const pyClients = `
import json, os, sys
import anthropic, openai

base, key = os.environ["GW"], os.environ["GW_KEY"]
out = {}
oa = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)
r = oa.chat.completions.create(model="codex-relay", messages=[{"role": "user", "content": "hi"}])
out["chat"] = {"text": r.choices[0].message.content, "completion_tokens": r.usage.completion_tokens}
text, usage = "", None
with oa.chat.completions.create(model="codex-relay", messages=[{"role": "user", "content": "hi"}], stream=True,
                                stream_options={"include_usage": True}) as s:
    for chunk in s:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage.completion_tokens
out["chat_stream"] = {"text": text, "completion_tokens": usage}

an = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=30)
for model in ("claude-native", "claude-relay"):
    m = an.messages.create(model=model, max_tokens=64, system="be brief",
                           messages=[{"role": "user", "content": "hi"}])
    out[model] = {"text": "".join(b.text for b in m.content if b.type == "text"), "stop": m.stop_reason,
                  "output_tokens": m.usage.output_tokens}
    with an.messages.stream(model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    out[model + "_stream"] = {"text": text, "stop": final.stop_reason, "output_tokens": final.usage.output_tokens}
print(json.dumps(out))
`

// TestPythonSDKsThroughEnvoy: the Python openai and anthropic SDKs get
// their answers, JSON and streamed, with usage, through the real Envoy.
func TestPythonSDKsThroughEnvoy(t *testing.T) {
	py := python(t)
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startAgentStack(t, r, nil)
		path := filepath.Join(t.TempDir(), "clients.py")
		if err := os.WriteFile(path, []byte(pyClients), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, path)
		cmd.Env = append(agentEnv(t.TempDir()), "GW="+s.envoyURL, "GW_KEY="+keyTeam)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("python clients: %v\n%s\n%s", err, out, stderr)
		}
		var got map[string]struct {
			Text             string `json:"text"`
			Stop             string `json:"stop"`
			CompletionTokens int    `json:"completion_tokens"`
			OutputTokens     int    `json:"output_tokens"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, k := range []string{"chat", "chat_stream", "claude-native", "claude-native_stream", "claude-relay", "claude-relay_stream"} {
			g, ok := got[k]
			tokens := g.CompletionTokens + g.OutputTokens
			if !ok || g.Text != finalText || tokens != 7 {
				t.Errorf("%s: %+v, want %q and 7 output tokens", k, g, finalText)
			}
			if strings.HasPrefix(k, "claude") && g.Stop != "end_turn" {
				t.Errorf("%s: stop_reason %q", k, g.Stop)
			}
		}
		if s.relay.Total().OK != 4 || s.ant.Total().OK != 2 {
			t.Errorf("relay answered %d (want 4), Anthropic provider %d (want 2)", s.relay.Total().OK, s.ant.Total().OK)
		}
	})
}
