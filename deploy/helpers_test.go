package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// parseEnvoy reads Envoy YAML the way Envoy does (YAML → JSON → proto,
// unknown fields rejected) and validates it with translator.Validate, which
// unpacks and validates every typed_config Any too.
func parseEnvoy(t *testing.T, what string, data []byte, m proto.Message) {
	t.Helper()
	j, err := sigsyaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	parseEnvoyJSON(t, what, j, m)
}

func parseEnvoyJSON(t *testing.T, what string, j []byte, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(j, m); err != nil {
		t.Fatalf("%s: parsing as %T: %v", what, m, err)
	}
	if err := translator.Validate(m); err != nil {
		t.Fatalf("%s: validating %T: %v", what, m, err)
	}
}

// parseEnvoyValue is parseEnvoy for a value already decoded from YAML.
func parseEnvoyValue(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	parseEnvoyJSON(t, what, j, m)
}

// envoyImage matches the official image, pinned: envoyproxy/envoy:v1.40.0 or
// envoyproxy/envoy:distroless-v1.40.0.
var envoyImage = regexp.MustCompile(`^envoyproxy/envoy:(?:distroless-)?v(\d+)\.(\d+)\.(\d+)$`)

// checkEnvoyImage requires a pinned official Envoy of at least 1.38, the
// minimum the data path relies on (docs/envoy-behaviour.md).
func checkEnvoyImage(t *testing.T, where, image string) {
	t.Helper()
	m := envoyImage.FindStringSubmatch(image)
	if m == nil {
		t.Errorf("%s: image %q is not a pinned envoyproxy/envoy:vX.Y.Z", where, image)
		return
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 1 || (major == 1 && minor < 38) {
		t.Errorf("%s: Envoy %s.%s is older than 1.38", where, m[1], m[2])
	}
}

// envRefs are the environment variables a config's secrets name.
func envRefs(cfg *config.Config) []string {
	var refs []string
	add := func(s config.Secret) {
		if name, ok := strings.CutPrefix(s.Ref(), "env:"); ok {
			refs = append(refs, name)
		}
	}
	add(cfg.Redis.Password)
	add(cfg.Admin.Token)
	add(cfg.Security.FleetSecret)
	add(cfg.Security.PreviousFleetSecret)
	for _, b := range cfg.Backends {
		for _, k := range b.Keys {
			add(k.Secret)
		}
	}
	for _, tn := range cfg.Tenants {
		for _, k := range tn.Keys {
			add(k.Secret)
		}
	}
	return refs
}

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return h, n
}

// flagValue is the value after --name in args ("" when absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		out = append(out, fmt.Sprint(e))
	}
	return out
}
