package deploy

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"go.yaml.in/yaml/v3"
)

// composeService is the part of a compose service the checks read
// (https://docs.docker.com/reference/compose-file/services/).
type composeService struct {
	Image       string         `yaml:"image"`
	Build       map[string]any `yaml:"build"`
	Command     []string       `yaml:"command"`
	Environment map[string]any `yaml:"environment"`
	Volumes     []string       `yaml:"volumes"`
	Ports       []string       `yaml:"ports"`
	DependsOn   map[string]any `yaml:"depends_on"`
}

func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(false) // x- extension fields and keys the checks ignore
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	if len(doc.Services) == 0 {
		t.Fatal("docker-compose.yaml: no services")
	}
	return doc.Services
}

// mounts maps container path → host path (relative to deploy/) of a
// service's bind mounts ("SRC:DST[:ro]").
func mounts(t *testing.T, name string, s composeService) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue // named volume
		}
		if _, err := os.Stat(filepath.Clean(parts[0])); err != nil {
			t.Errorf("service %s mounts %s: %v", name, parts[0], err)
		}
		out[parts[1]] = parts[0]
	}
	return out
}

func TestComposeFile(t *testing.T) {
	services := loadCompose(t)
	for _, want := range []string{"envoy", "swarmgate", "redis", "relay-a", "relay-b"} {
		if _, ok := services[want]; !ok {
			t.Fatalf("docker-compose.yaml has no service %q", want)
		}
	}
	for name, s := range services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		for dep := range s.DependsOn {
			if _, ok := services[dep]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
		}
		// Every swarmgate container builds the image it runs, so compose
		// never tries to pull swarmgate:dev from a registry.
		if strings.HasPrefix(s.Image, "swarmgate") {
			if ctx, _ := s.Build["context"].(string); ctx != ".." || s.Build["dockerfile"] != "deploy/Dockerfile" {
				t.Errorf("service %s: build = %v, want context .. and deploy/Dockerfile", name, s.Build)
			}
		}
	}
	checkEnvoyImage(t, "compose service envoy", services["envoy"].Image)

	// The swarmgate config: valid, and every env: secret it names is set.
	sg := services["swarmgate"]
	cfgPath := flagValue(sg.Command, "config")
	if sg.Command[0] != "serve" || cfgPath == "" {
		t.Fatalf("swarmgate command = %v, want serve --config FILE", sg.Command)
	}
	src, ok := mounts(t, "swarmgate", sg)[cfgPath]
	if !ok {
		t.Fatalf("swarmgate reads %s, which is not mounted", cfgPath)
	}
	cfg := loadConfig(t, src)
	for _, env := range envRefs(cfg) {
		if _, ok := sg.Environment[env]; !ok {
			t.Errorf("config names env:%s; service swarmgate does not set it", env)
		}
	}

	// What Envoy dials is the swarmgate service on the ports it listens on.
	for _, p := range []struct{ dial, listen string }{
		{cfg.Envoy.XDSAddress, cfg.Listen.XDS},
		{cfg.Envoy.ExtProcAddress, cfg.Listen.ExtProc},
		{cfg.Envoy.RateLimitAddress, cfg.Listen.RateLimit},
	} {
		host, port := hostPort(t, p.dial)
		lhost, lport := hostPort(t, p.listen)
		if host != "swarmgate" || port != lport || lhost != "0.0.0.0" {
			t.Errorf("Envoy dials %s but swarmgate listens on %s (want swarmgate:%d on 0.0.0.0)", p.dial, p.listen, lport)
		}
	}
	if !publishes(sg, cfg.Listen.Admin, true) {
		t.Errorf("swarmgate's admin %s is not published on the host's loopback: %v", cfg.Listen.Admin, sg.Ports)
	}

	// Each backend is a mock relay service: same name, auth and keys from
	// the same config file, listening on the base_url's port.
	for _, b := range cfg.Backends {
		u, err := url.Parse(b.BaseURL)
		if err != nil {
			t.Fatal(err)
		}
		relay, ok := services[u.Hostname()]
		if !ok {
			t.Errorf("backend %s: no compose service %q", b.Name, u.Hostname())
			continue
		}
		if relay.Command[0] != "mock-upstream" || flagValue(relay.Command, "backend") != b.Name {
			t.Errorf("service %s: command %v, want mock-upstream --backend %s", u.Hostname(), relay.Command, b.Name)
		}
		if got, want := flagValue(relay.Command, "listen"), "0.0.0.0:"+u.Port(); got != want {
			t.Errorf("service %s listens on %q, backend %s dials port %s", u.Hostname(), got, b.Name, u.Port())
		}
		if rsrc := mounts(t, u.Hostname(), relay)[flagValue(relay.Command, "config")]; rsrc != src {
			t.Errorf("service %s reads config %q, swarmgate reads %q", u.Hostname(), rsrc, src)
		}
		for _, env := range envRefs(cfg) {
			if _, ok := relay.Environment[env]; !ok {
				t.Errorf("service %s loads the config but does not set %s", u.Hostname(), env)
			}
		}
	}
	if _, ok := services[hostOf(cfg.Redis.Addrs[0])]; !ok {
		t.Errorf("redis address %s is not a compose service", cfg.Redis.Addrs[0])
	}

	// Envoy: the mounted bootstrap parses into Envoy's protos, validates,
	// and is the one generated from this config; the listener is published,
	// the admin only on the host's loopback.
	envoy := services["envoy"]
	bsPath := flagValue(envoy.Command, "c")
	if bsPath == "" {
		bsPath = flagValue(envoy.Command, "config-path")
	}
	if bsPath == "" && len(envoy.Command) > 1 && envoy.Command[0] == "-c" {
		bsPath = envoy.Command[1]
	}
	bsSrc, ok := mounts(t, "envoy", envoy)[bsPath]
	if !ok {
		t.Fatalf("envoy reads %q, which is not mounted (command %v)", bsPath, envoy.Command)
	}
	if filepath.Clean(bsSrc) != composeBootstrap {
		t.Errorf("envoy mounts %s, want the generated %s", bsSrc, composeBootstrap)
	}
	data, err := os.ReadFile(bsSrc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	parseEnvoy(t, bsSrc, data, &b)
	if b.GetNode().GetCluster() != cfg.Envoy.NodeCluster {
		t.Errorf("bootstrap node.cluster = %q, config says %q", b.GetNode().GetCluster(), cfg.Envoy.NodeCluster)
	}
	if !publishes(envoy, fmt.Sprintf("0.0.0.0:%d", cfg.Envoy.ListenerPort), false) {
		t.Errorf("Envoy's listener port %d is not published: %v", cfg.Envoy.ListenerPort, envoy.Ports)
	}
	admin := b.GetAdmin().GetAddress().GetSocketAddress()
	if !publishes(envoy, fmt.Sprintf("0.0.0.0:%d", admin.GetPortValue()), true) {
		t.Errorf("Envoy's admin port %d must be published on 127.0.0.1 only: %v", admin.GetPortValue(), envoy.Ports)
	}
	for _, p := range envoy.Ports {
		if strings.HasSuffix(p, ":"+strconv.Itoa(int(admin.GetPortValue()))) && !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("Envoy's admin is published beyond loopback: %q", p)
		}
	}
}

// publishes reports whether s publishes the container port of addr (on the
// host's loopback only when loopback is set).
func publishes(s composeService, addr string, loopback bool) bool {
	_, port, _ := strings.Cut(addr, ":")
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		port = addr[i+1:]
	}
	return slices.ContainsFunc(s.Ports, func(p string) bool {
		parts := strings.Split(p, ":")
		if parts[len(parts)-1] != port {
			return false
		}
		return !loopback || (len(parts) == 3 && parts[0] == "127.0.0.1")
	})
}

func hostOf(addr string) string {
	h, _, _ := strings.Cut(addr, ":")
	return h
}
