package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretResolve(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plain": "sk-plain\n", "crlf": "sk-crlf\r\n", "bom": "\uFEFFsk-bom\n", "inner": "sk-a\nsk-b\n",
		"empty": "\n", "tab": "sk-\ttab", "big": strings.Repeat("x", maxSecretFileBytes+1),
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"OK": "sk-env", "EMPTY": "", "SPACE": "sk- env", "NL": "sk-env\n", "BAD": "sk-\xff"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cases := []struct {
		ref, want, err string
	}{
		{"env:OK", "sk-env", ""},
		{" env:OK ", "sk-env", ""},
		{"env:MISSING", "", "environment variable MISSING is not set"},
		{"env:EMPTY", "", "empty value"},
		{"env:SPACE", "", "whitespace"},
		{"env:NL", "", "whitespace"},
		{"env:BAD", "", "UTF-8"},
		{"env:", "", "must be a reference"},
		{"env:A B", "", "invalid environment variable name"},
		{"file:plain", "sk-plain", ""},
		{"file:" + filepath.Join(dir, "crlf"), "sk-crlf", ""},
		{"file:bom", "sk-bom", ""},
		{"file:inner", "", "whitespace"},
		{"file:empty", "", "empty value"},
		{"file:tab", "", "whitespace"},
		{"file:big", "", "larger than"},
		{"file:/dev/zero", "", "not a regular file"},
		{"file:missing", "", "no such file"},
		{"file:", "", "must be a reference"},
		{"sk-inline", "", "must be a reference"},
		{"vault:secret/x", "", "must be a reference"},
	}
	for _, tc := range cases {
		t.Run(tc.ref, func(t *testing.T) {
			s := SecretRef(tc.ref)
			err := s.resolve(lookup, dir)
			if tc.err == "" {
				if err != nil || s.Value() != tc.want {
					t.Fatalf("got %q, %v", s.Value(), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
			for _, v := range []string{"sk-env", "sk- env", "sk-a", "sk-\ttab"} {
				if strings.Contains(err.Error(), v) {
					t.Fatalf("value in error: %v", err)
				}
			}
		})
	}
	if _, err := ResolveSecret("env:SPACE", lookup); err == nil || strings.Contains(err.Error(), "sk- env") {
		t.Fatalf("ResolveSecret: %v", err)
	}
	if s, err := ResolveSecret("env:OK", lookup); err != nil || s.Value() != "sk-env" || s.String() != "env:OK" {
		t.Fatalf("ResolveSecret: %v", err)
	}
}
