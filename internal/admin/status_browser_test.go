package admin

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// chromiumBinary finds Debian's chromium (`make test` installs it).
func chromiumBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found on PATH: apt-get install -y chromium (make test does)")
	return ""
}

// runChromium runs headless Chromium once against url with extra flags and
// returns its stdout. Virtual time lets the page's fetches and first poll
// finish before the DOM is dumped or the screenshot taken.
func runChromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	home := t.TempDir()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(home, "profile"), "--virtual-time-budget=5000",
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, chromiumBinary(t), args...)
	// Keep Chromium's caches and crash reports out of the real home.
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	// Chromium forks helpers: kill the whole group on timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, lastLines(stderr.String(), 20))
	}
	return stdout.Bytes()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// element returns the markup of the first <tag ...attr...>...</tag> in dom.
func element(t *testing.T, dom, tag, attr string) string {
	t.Helper()
	i := strings.Index(dom, attr)
	if i < 0 {
		t.Fatalf("no element with %s in the rendered DOM", attr)
	}
	start := strings.LastIndex(dom[:i], "<"+tag)
	end := strings.Index(dom[i:], "</"+tag+">")
	if start < 0 || end < 0 {
		t.Fatalf("malformed element around %s", attr)
	}
	return dom[start : i+end]
}

// TestStatusPageInChromium loads the status page with relay-a-2 tripped in
// real headless Chromium and checks what a person would see.
func TestStatusPageInChromium(t *testing.T) {
	ts := startServer(t, fullOptions(t))

	t.Run("dom", func(t *testing.T) {
		dom := string(runChromium(t, ts.URL+"/status", "--dump-dom"))
		if !strings.Contains(dom, `data-loaded="true"`) {
			t.Fatalf("page never finished its first poll:\n%s", dom)
		}
		cases := []struct{ key, state string }{
			{"relay-a/relay-a-2", "open"},
			{"relay-a/relay-a-1", "closed"},
			{"relay-b/relay-b-1", "half-open"},
		}
		for _, c := range cases {
			row := element(t, dom, "tr", `data-key="`+c.key+`"`)
			if !strings.Contains(row, `data-state="`+c.state+`"`) {
				t.Errorf("%s: breaker not %q in DOM: %s", c.key, c.state, row)
			}
		}
		if row := element(t, dom, "tr", `data-key="relay-a/relay-a-2"`); !strings.Contains(row, ">open<") || !strings.Contains(row, "s left") {
			t.Errorf("tripped key row does not read open with its reason: %s", row)
		}
		red := after(t, dom, `data-tenant="team-red"`, `data-tenant="team-blue"`)
		if m := contains(red, `data-percent="93.0"`, `data-level="bad"`, "46.50 / 50.00 USD", "width: 93%"); len(m) > 0 {
			t.Errorf("team-red budget bar lacks %q: %s", m, red)
		}
		queue := element(t, dom, "section", `id="admission-section"`)
		if m := contains(queue, `data-scope="relay-a"`, `data-scope="tpm:tenant:team-red"`, "depth 4 · oldest 1.25s",
			"5 waiting of 1024", "41 admitted after a wait", "3 timed out", "7 too long"); len(m) > 0 {
			t.Errorf("admission section lacks %q: %s", m, queue)
		}
		if row := element(t, queue, "tr", `data-waiters="relay-a/team-red/2"`); !strings.Contains(row, ">bulk<") || !strings.Contains(row, ">2<") {
			t.Errorf("team-red's bulk waiters on relay-a not shown as 2: %s", row)
		}
		if m := contains(dom, `data-status="ready"`, "budget exhausted (hard cap)", "1 of 3 keys open", "3 since start"); len(m) > 0 {
			t.Errorf("page lacks %q", m)
		}
		// A client-chosen model name is shown as text, never run as HTML.
		if strings.Contains(dom, "pwned") && !strings.Contains(dom, "&lt;img") {
			t.Error("refusal model name was not escaped")
		}
		if strings.Contains(dom, `data-pwned`) {
			t.Error("refusal model name executed as HTML")
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "status.png")
		runChromium(t, ts.URL+"/status", "--screenshot="+path, "--window-size=1280,900")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		if dir := os.Getenv("SWARMGATE_SCREENSHOT_DIR"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "status.png"), data, 0o644)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		b := img.Bounds()
		if b.Dx() < 800 || b.Dy() < 600 {
			t.Fatalf("screenshot %v too small", b)
		}
		colours, redPixels := pixelStats(img)
		if colours < 50 {
			t.Errorf("screenshot has %d distinct colours: blank page?", colours)
		}
		// The open breaker badge and the 93% budget bar are red (#dc2626).
		if redPixels < 500 {
			t.Errorf("only %d red pixels: open breaker / burnt budget not drawn", redPixels)
		}
	})
}

// after returns dom from the first from to the next to.
func after(t *testing.T, dom, from, to string) string {
	t.Helper()
	i := strings.Index(dom, from)
	if i < 0 {
		t.Fatalf("no %s in the rendered DOM", from)
	}
	rest := dom[i:]
	if j := strings.Index(rest, to); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func pixelStats(img image.Image) (distinct, red int) {
	seen := map[uint32]struct{}{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r8, g8, b8 := r>>8, g>>8, bl>>8
			seen[r8<<16|g8<<8|b8] = struct{}{}
			if near(r8, 0xdc) && near(g8, 0x26) && near(b8, 0x26) {
				red++
			}
		}
	}
	return len(seen), red
}

func near(v, want uint32) bool { return v+12 >= want && v <= want+12 }

// TestStatusPageQueueingOff: with admission.max_wait 0, or no queue in
// the process, the section says queueing is off.
func TestStatusPageQueueingOff(t *testing.T) {
	cases := []struct {
		name   string
		queue  QueueSource
		reason string
	}{
		{"max_wait 0", queued(), "queueing off: admission.max_wait is 0"},
		{"no queue", nil, "queueing off: no admission queue in this process"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := fullOptions(t)
			cfg := testConfig(t)
			cfg.Admission.MaxWait.Duration = 0
			opts.Config, opts.Queue = func() *config.Config { return cfg }, c.queue
			ts := startServer(t, opts)
			dom := string(runChromium(t, ts.URL+"/status", "--dump-dom"))
			if !strings.Contains(dom, `data-loaded="true"`) {
				t.Fatalf("page never finished its first poll:\n%s", dom)
			}
			queue := element(t, dom, "section", `id="admission-section"`)
			if !strings.Contains(queue, `data-queueing="off"`) || !strings.Contains(queue, c.reason) {
				t.Errorf("section does not say %q: %s", c.reason, queue)
			}
		})
	}
}

// TestStatusPageAsksForToken: with admin.token set the page still loads
// (its files hold no data), shows no data, and asks for the token.
func TestStatusPageAsksForToken(t *testing.T) {
	opts := fullOptions(t)
	opts.Access.Token = config.SecretFromValue("env:T_ADMIN", testAdminToken)
	ts := startServer(t, opts)
	dom := string(runChromium(t, ts.URL+"/status", "--dump-dom"))
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("page never finished its first poll:\n%s", dom)
	}
	form := element(t, dom, "form", `id="auth"`)
	if strings.Contains(form, "hidden") {
		t.Errorf("token form still hidden: %s", form)
	}
	if strings.Contains(dom, `data-key="relay-a/relay-a-2"`) || !strings.Contains(dom, "missing or wrong bearer token") {
		t.Errorf("page without a token shows data or no reason")
	}
}
