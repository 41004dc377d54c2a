package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	File       string `yaml:"-"`
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       yaml.Node         `yaml:"spec"`
	Resources  []string          `yaml:"resources"` // Kustomization
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec podSpec `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	Containers []container `yaml:"containers"`
	Volumes    []volume    `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Args    []string `yaml:"args"`
	EnvFrom []struct {
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports          []containerPort `yaml:"ports"`
	ReadinessProbe *probe          `yaml:"readinessProbe"`
	LivenessProbe  *probe          `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port any `yaml:"port"`
	} `yaml:"tcpSocket"`
}

type serviceSpec struct {
	ClusterIP string            `yaml:"clusterIP"`
	Selector  map[string]string `yaml:"selector"`
	Ports     []servicePort     `yaml:"ports"`
}

// k8sObjects decodes every document of every YAML file under
// deploy/kubernetes, as kubectl would (multi-document, strict types).
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	var objs []k8sObject
	err := filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s document %d: %w", p, i, err)
			}
			if o.Kind == "" && o.APIVersion == "" {
				continue // an empty document (a trailing ---)
			}
			o.File = p
			objs = append(objs, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeSpec[T any](t *testing.T, o k8sObject) T {
	t.Helper()
	var s T
	if err := o.Spec.Decode(&s); err != nil {
		t.Fatalf("%s %s/%s spec: %v", o.File, o.Kind, o.Metadata.Name, err)
	}
	return s
}

func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	cfg := k8sGatewayConfig(t)
	byKind := map[string]map[string]k8sObject{}
	for _, o := range objs {
		if o.APIVersion == "" || o.Kind == "" {
			t.Errorf("%s: a document without apiVersion or kind", o.File)
			continue
		}
		if o.Kind == "Kustomization" {
			checkKustomization(t, o)
			continue
		}
		if o.Metadata.Name == "" {
			t.Errorf("%s: %s without metadata.name", o.File, o.Kind)
		}
		if o.Kind != "Namespace" && o.Metadata.Namespace == "" {
			t.Errorf("%s: %s/%s has no namespace", o.File, o.Kind, o.Metadata.Name)
		}
		if byKind[o.Kind] == nil {
			byKind[o.Kind] = map[string]k8sObject{}
		}
		key := o.Metadata.Namespace + "/" + o.Metadata.Name
		if _, dup := byKind[o.Kind][key]; dup {
			t.Errorf("%s: %s %s defined twice", o.File, o.Kind, key)
		}
		byKind[o.Kind][key] = o
	}

	deployments := map[string]deploymentSpec{}
	for key, o := range byKind["Deployment"] {
		d := decodeSpec[deploymentSpec](t, o)
		deployments[key] = d
		for k, v := range d.Selector.MatchLabels {
			if d.Template.Metadata.Labels[k] != v {
				t.Errorf("Deployment %s: selector %s=%s does not match its pod labels", key, k, v)
			}
		}
		checkPod(t, key, o.Metadata.Namespace, d.Template.Spec, byKind, cfg)
	}

	// Services select a Deployment's pods and target ports those pods
	// declare; what Envoy dials is one of them.
	services := map[string]serviceSpec{}
	for key, o := range byKind["Service"] {
		s := decodeSpec[serviceSpec](t, o)
		services[key] = s
		var target *deploymentSpec
		for dk, d := range deployments {
			if strings.HasPrefix(dk, o.Metadata.Namespace+"/") && matches(s.Selector, d.Template.Metadata.Labels) {
				target = &d
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no Deployment's pods", key)
			continue
		}
		for _, p := range s.Ports {
			if name, ok := p.TargetPort.(string); ok && !slices.ContainsFunc(target.Template.Spec.Containers, func(c container) bool {
				return slices.ContainsFunc(c.Ports, func(cp containerPort) bool {
					return cp.Name == name && (s.ClusterIP != "None" || cp.ContainerPort == p.Port)
				})
			}) {
				t.Errorf("Service %s port %d targets %q, which its pods do not declare (headless: with the same number)", key, p.Port, name)
			}
		}
	}
	for _, dial := range []string{cfg.Envoy.XDSAddress, cfg.Envoy.ExtProcAddress, cfg.Envoy.RateLimitAddress, cfg.Redis.Addrs[0]} {
		host, port := hostPort(t, dial)
		name, ns, ok := strings.Cut(strings.TrimSuffix(host, ".svc.cluster.local"), ".")
		s, found := services[ns+"/"+name]
		if !ok || !found || !slices.ContainsFunc(s.Ports, func(p servicePort) bool {
			return p.Port == port
		}) {
			t.Errorf("the config dials %s, which is no Service port in deploy/kubernetes", dial)
		}
	}
	if _, ok := byKind["ConfigMap"]["swarmgate/envoy-bootstrap"]; !ok {
		t.Error("no ConfigMap envoy-bootstrap")
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkPod checks one pod template: its references exist, swarmgate
// containers run a role on the mounted config with the admin-port probes,
// Envoy containers run a pinned Envoy on a valid mounted bootstrap.
func checkPod(t *testing.T, key, ns string, pod podSpec, byKind map[string]map[string]k8sObject, cfg *config.Config) {
	t.Helper()
	volumeCM := map[string]string{}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			if _, ok := byKind["ConfigMap"][ns+"/"+v.ConfigMap.Name]; !ok {
				t.Errorf("Deployment %s mounts ConfigMap %s, which is not defined", key, v.ConfigMap.Name)
			}
			volumeCM[v.Name] = v.ConfigMap.Name
		}
	}
	// fileIn is the ConfigMap key behind a path in the container.
	fileIn := func(c container, p string) (string, bool) {
		for _, m := range c.VolumeMounts {
			if cm, ok := volumeCM[m.Name]; ok && path.Dir(p) == m.MountPath {
				data, ok := byKind["ConfigMap"][ns+"/"+cm].Data[path.Base(p)]
				return data, ok
			}
		}
		return "", false
	}
	for _, c := range pod.Containers {
		where := fmt.Sprintf("Deployment %s container %s", key, c.Name)
		for _, m := range c.VolumeMounts {
			if !slices.ContainsFunc(pod.Volumes, func(v volume) bool {
				return v.Name == m.Name
			}) {
				t.Errorf("%s mounts unknown volume %s", where, m.Name)
			}
		}
		secretKeys := map[string]bool{}
		for _, e := range c.EnvFrom {
			if e.SecretRef == nil {
				continue
			}
			s, ok := byKind["Secret"][ns+"/"+e.SecretRef.Name]
			if !ok {
				t.Errorf("%s reads Secret %s, which is not defined", where, e.SecretRef.Name)
			}
			for k := range s.StringData {
				secretKeys[k] = true
			}
			for k := range s.Data {
				secretKeys[k] = true
			}
		}
		switch {
		case strings.HasPrefix(c.Image, "swarmgate"):
			checkSwarmgateContainer(t, where, c, fileIn, secretKeys, cfg)
		case strings.HasPrefix(c.Image, "envoyproxy/envoy"):
			checkEnvoyImage(t, where, c.Image)
			bsPath := flagValue(c.Args, "config-path")
			data, ok := fileIn(c, bsPath)
			if !ok {
				t.Errorf("%s reads bootstrap %q, which no mounted ConfigMap holds", where, bsPath)
				continue
			}
			var b bootstrapv3.Bootstrap
			parseEnvoy(t, where+" bootstrap", []byte(data), &b)
			if b.GetNode().GetCluster() != cfg.Envoy.NodeCluster {
				t.Errorf("%s: bootstrap node.cluster %q, config says %q", where, b.GetNode().GetCluster(), cfg.Envoy.NodeCluster)
			}
			if a := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); a != "127.0.0.1" {
				t.Errorf("%s: Envoy admin on %s, keep it on loopback", where, a)
			}
			if flagValue(c.Args, "service-node") == "" {
				t.Errorf("%s: no --service-node: every pod would share one node id", where)
			}
			if !slices.ContainsFunc(c.Ports, func(p containerPort) bool {
				return p.ContainerPort == int(cfg.Envoy.ListenerPort)
			}) {
				t.Errorf("%s does not declare the listener port %d", where, cfg.Envoy.ListenerPort)
			}
		}
	}
}

func checkSwarmgateContainer(t *testing.T, where string, c container, fileIn func(container, string) (string, bool), secretKeys map[string]bool, cfg *config.Config) {
	t.Helper()
	if len(c.Args) == 0 {
		t.Errorf("%s: no role in args", where)
		return
	}
	rolePort := map[string]string{"serve": cfg.Listen.ExtProc, "xds": cfg.Listen.XDS, "extproc": cfg.Listen.ExtProc, "ratelimit": cfg.Listen.RateLimit}
	listen, ok := rolePort[c.Args[0]]
	if !ok {
		t.Errorf("%s: unknown role %q", where, c.Args[0])
		return
	}
	cfgPath := flagValue(c.Args, "config")
	data, ok := fileIn(c, cfgPath)
	if !ok {
		t.Errorf("%s reads %q, which no mounted ConfigMap holds", where, cfgPath)
	} else if got := parseConfig(t, []byte(data), where); got.Listen != cfg.Listen {
		t.Errorf("%s reads a config other than swarmgate-config", where)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	_, adminPort := hostPort(t, cfg.Listen.Admin)
	if ports["admin"] != adminPort {
		t.Errorf("%s: port admin = %d, config listens on %s", where, ports["admin"], cfg.Listen.Admin)
	}
	if h, _ := hostPort(t, cfg.Listen.Admin); h != "0.0.0.0" {
		t.Errorf("%s: listen.admin %s is not reachable by the kubelet's probes", where, cfg.Listen.Admin)
	}
	_, want := hostPort(t, listen)
	found := false
	for _, p := range c.Ports {
		found = found || p.ContainerPort == want
	}
	if !found {
		t.Errorf("%s (%s) does not declare port %d", where, c.Args[0], want)
	}
	for _, pr := range []struct {
		p    *probe
		path string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || fmt.Sprint(pr.p.HTTPGet.Port) != "admin" {
			t.Errorf("%s: want an httpGet probe on %s, port admin", where, pr.path)
		}
	}
	// Every role serves the admin API, off loopback here, and resolves
	// admin.token.
	if cfg.Admin.Token.IsZero() {
		t.Errorf("%s: listen.admin %s without admin.token", where, cfg.Listen.Admin)
	} else if env, ok := strings.CutPrefix(cfg.Admin.Token.Ref(), "env:"); ok && !secretKeys[env] {
		t.Errorf("%s: admin.token names env:%s, no Secret it reads holds it", where, env)
	}
	// ext_proc resolves the upstream keys; it must see every one.
	if c.Args[0] == "extproc" || c.Args[0] == "serve" {
		for _, env := range envRefs(cfg) {
			if !secretKeys[env] {
				t.Errorf("%s: config names env:%s, no Secret it reads holds it", where, env)
			}
		}
	}
}

func checkKustomization(t *testing.T, o k8sObject) {
	t.Helper()
	dir := filepath.Dir(o.File)
	listed := map[string]bool{}
	for _, r := range o.Resources {
		listed[r] = true
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			t.Errorf("%s lists %s: %v", o.File, r, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !listed[b] {
			t.Errorf("%s does not list %s", o.File, b)
		}
	}
}

// TestEnvoyPatchPolicy parses every patch value into the Envoy type it
// lands in and validates it (typed_config included).
func TestEnvoyPatchPolicy(t *testing.T) {
	var pol *k8sObject
	objs := k8sObjects(t)
	for i, o := range objs {
		if o.Kind == "EnvoyPatchPolicy" {
			pol = &objs[i]
		}
	}
	if pol == nil {
		t.Fatal("no EnvoyPatchPolicy under deploy/kubernetes")
	}
	var spec struct {
		TargetRef struct {
			Kind, Name string
		} `yaml:"targetRef"`
		Type        string `yaml:"type"`
		JSONPatches []struct {
			Type      string `yaml:"type"`
			Name      string `yaml:"name"`
			Operation struct {
				Op    string `yaml:"op"`
				Path  string `yaml:"path"`
				Value any    `yaml:"value"`
			} `yaml:"operation"`
		} `yaml:"jsonPatches"`
	}
	if err := pol.Spec.Decode(&spec); err != nil {
		t.Fatal(err)
	}
	if spec.Type != "JSONPatch" || spec.TargetRef.Kind != "Gateway" || spec.TargetRef.Name != egGateway {
		t.Errorf("spec = %+v", spec)
	}
	clusters := map[string]bool{}
	var filters []string
	for i, p := range spec.JSONPatches {
		what := fmt.Sprintf("jsonPatches[%d] (%s %s)", i, p.Operation.Op, p.Operation.Path)
		var m proto.Message
		switch {
		case p.Type == typeCluster && p.Operation.Path == "":
			m = &clusterv3.Cluster{}
		case p.Type == typeListener && strings.HasPrefix(p.Operation.Path, egHCM+"/http_filters/"):
			m = &hcmv3.HttpFilter{}
		case p.Type == typeListener && p.Operation.Path == egHCM+"/rds":
			m = &hcmv3.Rds{}
		case p.Type == typeListener && p.Operation.Path == egHCM+"/local_reply_config":
			m = &hcmv3.LocalReplyConfig{}
		default:
			t.Errorf("%s: a patch this test does not know how to check", what)
			continue
		}
		if p.Type == typeListener && p.Name != egNamespace+"/"+egGateway+"/"+egListener {
			t.Errorf("%s patches listener %q", what, p.Name)
		}
		parseEnvoyValue(t, what, p.Operation.Value, m)
		switch v := m.(type) {
		case *clusterv3.Cluster:
			clusters[v.GetName()] = true
			if v.GetName() != p.Name {
				t.Errorf("%s: patch name %q, cluster %q", what, p.Name, v.GetName())
			}
		case *hcmv3.HttpFilter:
			filters = append(filters, v.GetName())
		}
	}
	for _, n := range []string{contract.ClusterXDS, contract.ClusterExtProc, contract.ClusterRateLimit, contract.Pool{Alias: "gpt-4o-mini"}.Cluster()} {
		if !clusters[n] {
			t.Errorf("the policy adds no cluster %s", n)
		}
	}
	if !slices.Equal(filters, []string{"envoy.filters.http.ext_proc", "envoy.filters.http.ratelimit"}) {
		t.Errorf("filters inserted = %v, want ext_proc then ratelimit before Envoy Gateway's router", filters)
	}
}
