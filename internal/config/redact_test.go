package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestRedactedRoundTrip(t *testing.T) {
	for _, f := range []string{"testdata/example.yaml", "default.yaml"} {
		t.Run(f, func(t *testing.T) {
			env := func(k string) (string, bool) {
				if v, ok := testEnv[k]; ok {
					return v, true
				}
				return "sk-" + strings.ToLower(k), true
			}
			c, err := Load(f, Options{LookupEnv: env})
			if err != nil {
				t.Fatal(err)
			}
			red, err := Redacted(c)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(red), "hooks.example.com/services") {
				t.Error("webhook path not redacted")
			}
			back, err := Parse(red, "redacted.yaml", Options{LookupEnv: env, BaseDir: "testdata"})
			if err != nil && c.Alerts.WebhookURL == "" {
				t.Fatalf("redacted dump does not parse back: %v\n%s", err, red)
			}
			if err != nil {
				t.Fatalf("redacted dump does not parse back: %v", err)
			}
			// Everything but the redacted webhook path survives.
			back.Alerts.WebhookURL, back.Source = c.Alerts.WebhookURL, c.Source
			if !reflect.DeepEqual(back.Backends, c.Backends) || !reflect.DeepEqual(back.Models, c.Models) ||
				!reflect.DeepEqual(back.Retry, c.Retry) || !reflect.DeepEqual(back.Request, c.Request) || !reflect.DeepEqual(back.Redis, c.Redis) {
				t.Errorf("round trip changed the config:\n%s", red)
			}
			for i := range c.Tenants {
				for j := range c.Tenants[i].Keys {
					if back.Tenants[i].Keys[j].Hash != c.Tenants[i].Keys[j].Hash {
						t.Errorf("tenant %d key %d hash differs", i, j)
					}
				}
			}
		})
	}
}

func TestRedactedNil(t *testing.T) {
	if _, err := Redacted(nil); err == nil {
		t.Fatal("nil accepted")
	}
}
