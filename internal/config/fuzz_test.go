package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics or hangs; every content error has a line
// and a path; an accepted config dumps (Redacted) and parses back.
// Seeds: every testdata config and the embedded default.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/invalid/*.yaml")
	seeds = append(seeds, "testdata/example.yaml", "default.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("backends: [{name: x, keys: [{<<: {weight: 0}}]}]\n"))
	env := func(k string) (string, bool) { return "sk-fuzz-" + k, len(k) > 0 && len(k) < 64 }
	f.Fuzz(func(t *testing.T, data []byte) {
		// SkipSecrets: fuzzed file: references must not read the disk.
		opts := Options{LookupEnv: env, SkipSecrets: true}
		c, err := Parse(data, "fuzz.yaml", opts)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("not an Errors value: %T %v", err, err)
			}
			for _, e := range errs {
				if e.Line <= 0 || e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("error without line or message: %q", e.Error())
				}
			}
			return
		}
		red, err := Redacted(c)
		if err != nil {
			t.Fatalf("Redacted: %v", err)
		}
		if _, err := Parse(red, "redacted.yaml", opts); err != nil && c.Alerts.WebhookURL == "" {
			t.Fatalf("accepted config's dump does not parse back: %v\n--- input\n%s\n--- dump\n%s", err, data, red)
		}
	})
}
