package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("k1", "key-one\n")
	write("k2", "key-two")
	write("admin", "an-admin-token-of-some-length\n")
	src := `
admin:
  token: file:admin
backends:
  - name: a
    base_url: http://127.0.0.1:1/v1
    keys:
      - {id: a1, secret: file:k1}
      - {id: a2, secret: file:` + filepath.Join(dir, "k2") + `}
      - {id: a3, secret: env:K3}
  - name: b
    base_url: http://127.0.0.1:2/v1
    keys:
      - {id: b1, secret: file:k1}
models:
  - {name: m, targets: [{backend: a}, {backend: b}]}
`
	c, err := Parse([]byte(src), "gateway.yaml", Options{BaseDir: dir, LookupEnv: func(string) (string, bool) { return "k3", true }})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "admin"), filepath.Join(dir, "k1"), filepath.Join(dir, "k2")}
	if got := c.SecretFiles(); !slices.Equal(got, want) {
		t.Fatalf("SecretFiles = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name    string
		change  func()
		changed bool
	}{
		{"nothing written", func() {}, false},
		{"the same value, line ends changed", func() { write("k1", "key-one\r\n") }, false},
		{"a key rotated", func() { write("k2", "key-two-rotated") }, true},
		{"back as loaded", func() { write("k2", "key-two\n") }, false},
		{"a file removed", func() { os.Remove(filepath.Join(dir, "admin")) }, true},
	} {
		tc.change()
		if got := c.SecretFilesChanged(); got != tc.changed {
			t.Errorf("%s: SecretFilesChanged = %v, want %v", tc.name, got, tc.changed)
		}
	}
}
