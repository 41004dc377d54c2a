package e2eenvoy

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// TestMakeRunWithEnvoy runs what `make run` runs (scripts/run.sh) with an
// Envoy available: it must start Envoy from the generated bootstrap and
// print a chat-completion curl that works against it. It uses the default
// config's fixed ports (10000, 18000-18002, 19000, 6379 and the mock
// relays'), so it needs them free.
func TestMakeRunWithEnvoy(t *testing.T) {
	envoy := envoytest.Newest(t).Path
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "swarmgate")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/swarmgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "run.sh"))
	cmd.Env = append(os.Environ(), "ENVOY_BIN="+envoy, "SWARMGATE_BIN="+bin, "SWARMGATE_RUN_DIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	// The printed curl spans three lines after "Then call it:".
	var curl []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if i := strings.Index(line, "Then call it:"); i >= 0 {
			curl = append(curl, strings.TrimSpace(line[i+len("Then call it:"):]))
			continue
		}
		if len(curl) > 0 {
			curl = append(curl, strings.TrimSpace(line))
			if !strings.HasSuffix(line, `\`) {
				break
			}
		}
	}
	if len(curl) == 0 {
		t.Fatal("run.sh printed no curl command")
	}
	go func() { // keep draining the script's output
		for sc.Scan() {
		}
	}()
	command := strings.Join(curl, " ")
	command = strings.ReplaceAll(command, `\ `, " ")
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, err := exec.CommandContext(ctx, "bash", "-c", command+" --fail-with-body --max-time 10").Output()
		if err == nil && strings.Contains(string(body), `"chat.completion"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the printed curl did not work through Envoy: %v\n%s", err, body)
		}
		time.Sleep(500 * time.Millisecond) // Envoy takes its config over ADS
	}
}
