package service

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/envoyproxy/ratelimit/src/settings"
)

// defaultSettings must equal what the library itself builds from an empty
// environment; the test skips when the environment sets one of its
// variables (then NewSettings is not the reference).
func TestDefaultSettingsMatchLibrary(t *testing.T) {
	typ := reflect.TypeOf(settings.Settings{})
	for i := 0; i < typ.NumField(); i++ {
		if name, ok := typ.Field(i).Tag.Lookup("envconfig"); ok {
			if _, set := os.LookupEnv(name); set {
				t.Skipf("environment sets %s", name)
			}
		}
	}
	got, err := defaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	want := settings.NewSettings()
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if _, tagged := f.Tag.Lookup("envconfig"); !tagged {
			continue // TLS configs and the interceptor are built, not parsed
		}
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if gv.Field(i).Kind() == reflect.Map || gv.Field(i).Kind() == reflect.Slice {
			if gv.Field(i).Len() == 0 && wv.Field(i).Len() == 0 {
				continue
			}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: %v, library default %v", f.Name, g, w)
		}
	}
}

func TestCheckEnvironmentListsOverrides(t *testing.T) {
	env := map[string]string{"SHADOW_MODE": "true", "HOME": "/root"}
	set, err := checkEnvironment(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(set, ",") != "SHADOW_MODE" {
		t.Errorf("overrides %v, want [SHADOW_MODE]", set)
	}
}
