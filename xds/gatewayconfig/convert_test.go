package gatewayconfig

import (
	"bytes"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/config"
)

const secretValue = "sk-live-DO-NOT-LEAK-0123456789"

func env(string) (string, bool) { return secretValue, true }

func TestRoundTrip(t *testing.T) {
	for _, name := range []string{"../translator/testdata/mixed.yaml", "../translator/testdata/default.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(name, config.Options{LookupEnv: env, SkipSecrets: true})
			if err != nil {
				t.Fatal(err)
			}
			gc := FromConfig(cfg)
			wire, err := proto.Marshal(gc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ToConfig(gc, config.Options{LookupEnv: env, SkipSecrets: true})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := yaml.Marshal(cfg)
			b, _ := yaml.Marshal(got)
			if !bytes.Equal(a, b) {
				t.Errorf("round trip changed the config:\n%s\n---\n%s", a, b)
			}
			if len(wire) == 0 {
				t.Fatal("empty wire form")
			}
			if _, ok := got.Model(cfg.Models[0].Name); !ok {
				t.Error("index not built by ToConfig")
			}
		})
	}
}

func TestNoSecretValues(t *testing.T) {
	// Secrets resolved (as on a control plane that has them): the wire form
	// still carries only references.
	cfg, err := config.Load("../translator/testdata/mixed.yaml", config.Options{LookupEnv: env, SkipSecrets: false})
	if err != nil {
		// file: secrets do not exist on this machine; resolve env only.
		cfg, err = config.Load("../translator/testdata/default.yaml", config.Options{LookupEnv: env})
		if err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Backends[0].Keys[0].Secret.Value() != secretValue {
		t.Fatal("test setup: secret not resolved")
	}
	gc := FromConfig(cfg)
	wire, _ := proto.Marshal(gc)
	if bytes.Contains(wire, []byte(secretValue)) || strings.Contains(prototext.Format(gc), secretValue) {
		t.Fatal("a secret value reached the GatewayConfig")
	}
	if !strings.Contains(prototext.Format(gc), "env:SWARMGATE_DEMO_KEY_A1") {
		t.Error("secret reference missing")
	}
	// A replica resolves the references itself.
	got, err := ToConfig(gc, config.Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if got.Backends[0].Keys[0].Secret.Value() != secretValue {
		t.Error("replica did not resolve the secret reference")
	}
}

func TestToConfigRejectsInvalid(t *testing.T) {
	cfg, err := config.Load("../translator/testdata/default.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	gc := FromConfig(cfg)
	gc.Models[0].Targets[0].Backend = "nope"
	if _, err := ToConfig(gc, config.Options{SkipSecrets: true}); err == nil || !strings.Contains(err.Error(), "unknown backend") {
		t.Fatalf("want unknown backend error, got %v", err)
	}
}
