package e2eenvoy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// The fixed ports of the embedded default config and of `make run`'s Envoy.
var makeRunPorts = []int{18000, 18001, 18002, 19000, 10000, 18101, 18102, 9901}

// runScript starts scripts/run.sh as `make run` does, with Envoy from
// envoytest, and returns its combined output as lines and the process.
func runScript(t *testing.T, ctx context.Context, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "swarmgate")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/swarmgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "run.sh"))
	runDir := t.TempDir()
	// A script killed (a test that timed out) cannot stop the Redis it
	// daemonised: stop it here, or it holds 6379 for every later run.
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(runDir, "redis.pid")); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err == nil && strings.Contains(string(cmdline), "redis-server") {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
	cmd.Env = append(os.Environ(), "ENVOY_BIN="+envoytest.Newest(t).Path, "SWARMGATE_BIN="+bin, "SWARMGATE_RUN_DIR="+runDir)
	cmd.Env = append(cmd.Env, env...)
	// Its own process group, so a leftover child can be killed at the end;
	// the test itself signals only the script, as Ctrl-C or kill would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			t.Log(sc.Text())
			select {
			case lines <- sc.Text():
			default: // nobody reads any more: keep draining
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return cmd, lines
}

func portOpen(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
	if err == nil {
		c.Close()
		return true
	}
	return false
}

// TestMakeRunWithEnvoy runs what `make run` runs (scripts/run.sh): it must
// start Envoy from the generated bootstrap and print a chat-completion curl
// that works against it; SIGTERM to the script then stops everything it
// started (Envoy, serve, both mock relays and the redis-server it started).
// It uses the default config's fixed ports, so it needs them free.
func TestMakeRunWithEnvoy(t *testing.T) {
	for _, p := range append(makeRunPorts, 6379) {
		if portOpen(p) {
			t.Fatalf("port %d is in use before the test: make run needs the default ports free", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	makeRunServes(t, ctx, makeRunPorts)
}

// TestMakeRunOwnConfig: make run with a config of one's own that moves the
// gateway's ports (SWARMGATE_CONFIG_FILE, the mock relays kept) waits for
// that config's admin listener and prints a request to that config's
// Envoy port, which works. Before, the script assumed the embedded
// config's ports: it waited 15 s for an admin port nothing served and
// printed a curl to port 10000.
func TestMakeRunOwnConfig(t *testing.T) {
	moved := map[string]string{"127.0.0.1:18000": "127.0.0.1:18200", "127.0.0.1:18001": "127.0.0.1:18201",
		"127.0.0.1:18002": "127.0.0.1:18202", "127.0.0.1:19000": "127.0.0.1:19200", "listener_port: 10000": "listener_port: 10200"}
	ports := []int{18200, 18201, 18202, 19200, 10200, 18101, 18102, 9901}
	for _, p := range append(ports, 6379) {
		if portOpen(p) {
			t.Fatalf("port %d is in use before the test", p)
		}
	}
	raw, err := os.ReadFile("../../internal/config/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(raw)
	for from, to := range moved {
		if !strings.Contains(cfg, from) {
			t.Fatalf("default.yaml has no %q", from)
		}
		cfg = strings.ReplaceAll(cfg, from, to)
	}
	path := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	curl := makeRunServes(t, ctx, ports, "SWARMGATE_CONFIG_FILE="+path, "SWARMGATE_RUN_MOCKS=1")
	if !strings.Contains(curl, "localhost:10200/") {
		t.Errorf("the printed request does not go to the config's Envoy port 10200: %s", curl)
	}
}

// makeRunServes runs scripts/run.sh with env, calls the request it prints
// until it works through Envoy, stops the script with SIGTERM and checks
// that everything it started (listening on ports, and Redis when it
// started one) is gone. It returns the printed request.
func makeRunServes(t *testing.T, ctx context.Context, ports []int, env ...string) string {
	t.Helper()
	cmd, lines := runScript(t, ctx, env...)

	// The printed curl spans three lines after "Then call it:".
	var curl []string
	startedRedis := false
	for line := range lines {
		if strings.HasPrefix(line, "starting redis-server") {
			startedRedis = true
		}
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
	if !startedRedis {
		t.Error("run.sh did not say it started redis-server on a machine without one")
	}
	command := strings.ReplaceAll(strings.Join(curl, " "), `\ `, " ")
	var body []byte
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		body, err = exec.CommandContext(ctx, "bash", "-c", command+" --fail-with-body --max-time 10").Output()
		if err == nil && strings.Contains(string(body), `"chat.completion"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the printed curl did not work through Envoy: %v\n%s", err, body)
		}
		time.Sleep(500 * time.Millisecond) // Envoy takes its config over ADS
	}

	// SIGTERM to the script alone, as `kill` or a service manager sends it.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Log("run.sh exited 0 on SIGTERM")
	}
	if startedRedis {
		ports = append(ports, 6379)
	}
	for _, p := range ports {
		gone := false
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if !portOpen(p) {
				gone = true
				break
			}
		}
		if !gone {
			t.Errorf("port %d still served after make run was stopped: something it started kept running", p)
		}
	}
	return command
}

// TestMakeRunNamesATakenPort: a port of the default config that another
// program holds stops make run before it starts anything, with a message
// naming the port and the setting that moves it.
func TestMakeRunNamesATakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:18001")
	if err != nil {
		t.Fatalf("holding 18001: %v", err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, lines := runScript(t, ctx)
	var out []string
	for line := range lines {
		out = append(out, line)
	}
	err = cmd.Wait()
	text := strings.Join(out, "\n")
	if err == nil {
		t.Fatalf("run.sh succeeded with port 18001 taken:\n%s", text)
	}
	for _, want := range []string{"port 18001 is already in use", "listen.extproc", "SWARMGATE_CONFIG_FILE"} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "starting redis-server") {
		t.Error("run.sh started Redis before checking its ports")
	}
}
