package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocsCoverEveryField keeps docs/config.md honest: every YAML field of
// the model is documented, and the full example is the tested one.
func TestDocsCoverEveryField(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatalf("docs/config.md is part of the repo: %v", err)
	}
	var walk func(reflect.Type, string)
	seen := map[reflect.Type]bool{}
	walk = func(ty reflect.Type, prefix string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || reflect.PointerTo(ty).Implements(unmarshalerType) {
			return
		}
		seen[ty] = true
		names, types := yamlFields(ty)
		for _, n := range names {
			found := false
			for _, form := range []string{"`" + n + "`", "." + n + "`", "`" + n + "[]`", "`" + n + ".", "." + n + "[]"} {
				found = found || strings.Contains(string(doc), form)
			}
			if !found {
				t.Errorf("docs/config.md does not document %s%s", prefix, n)
			}
			walk(types[n], prefix+n+".")
		}
	}
	walk(reflect.TypeFor[Config](), "")
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body := string(example)
	body = body[strings.Index(body, "listen:"):]
	if !strings.Contains(string(doc), body) {
		t.Error("docs/config.md's full example differs from testdata/example.yaml")
	}
}
