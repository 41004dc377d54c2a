package deploy

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

type networkPolicySpec struct {
	PodSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"podSelector"`
	PolicyTypes []string `yaml:"policyTypes"`
	Ingress     []struct {
		From []struct {
			PodSelector *struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"podSelector"`
			NamespaceSelector *struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"namespaceSelector"`
		} `yaml:"from"`
		Ports []struct {
			Protocol string `yaml:"protocol"`
			Port     int    `yaml:"port"`
		} `yaml:"ports"`
	} `yaml:"ingress"`
}

// TestNetworkPolicies: who may reach each swarmgate port, read from the
// manifests the way the API server would apply them. A port of a selected
// pod that no rule names is closed.
func TestNetworkPolicies(t *testing.T) {
	const name = "app.kubernetes.io/name"
	// target pod -> port -> the allowed peers ("pod:<name>" or "ns:<name>").
	got := map[string]map[int][]string{}
	for _, o := range k8sObjects(t) {
		if o.Kind != "NetworkPolicy" {
			continue
		}
		s := decodeSpec[networkPolicySpec](t, o)
		target := s.PodSelector.MatchLabels[name]
		if target == "" || !slices.Contains(s.PolicyTypes, "Ingress") {
			t.Errorf("NetworkPolicy %s: selects no swarmgate role by %s or is not an Ingress policy", o.Metadata.Name, name)
			continue
		}
		if got[target] == nil {
			got[target] = map[int][]string{}
		}
		for _, r := range s.Ingress {
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s: a rule without from or ports opens everything", o.Metadata.Name)
			}
			for _, p := range r.Ports {
				for _, f := range r.From {
					switch {
					case f.PodSelector != nil && f.NamespaceSelector == nil:
						got[target][p.Port] = append(got[target][p.Port], "pod:"+f.PodSelector.MatchLabels[name])
					case f.NamespaceSelector != nil && f.PodSelector == nil:
						got[target][p.Port] = append(got[target][p.Port], "ns:"+f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
					default:
						t.Errorf("NetworkPolicy %s: unexpected peer %+v", o.Metadata.Name, f)
					}
				}
			}
		}
	}
	want := map[string]map[int][]string{
		"swarmgate-extproc":   {18001: {"pod:swarmgate-envoy"}, 19000: {"ns:monitoring"}},
		"swarmgate-ratelimit": {18002: {"pod:swarmgate-envoy", "pod:swarmgate-extproc"}, 19000: {"ns:monitoring"}},
		// The rate-limit service loads its limits over xDS.
		"swarmgate-xds":   {18000: {"pod:swarmgate-envoy", "pod:swarmgate-extproc", "pod:swarmgate-ratelimit"}, 19000: {"ns:monitoring"}},
		"swarmgate-redis": {6379: {"pod:swarmgate-extproc", "pod:swarmgate-ratelimit", "pod:swarmgate-xds"}},
	}
	for target, ports := range want {
		for port, peers := range ports {
			g := got[target][port]
			sort.Strings(g)
			if !slices.Equal(g, peers) {
				t.Errorf("%s port %d: reachable from %v, want exactly %v", target, port, g, peers)
			}
		}
		for port := range got[target] {
			if _, ok := ports[port]; !ok {
				t.Errorf("%s: port %d opened, not expected", target, port)
			}
		}
	}
}

// TestKubernetesTLS: the config's listeners all serve mutual TLS with client
// identities, and every pod mounts a certificate Secret where the config
// (and Envoy's bootstrap) read it.
func TestKubernetesTLS(t *testing.T) {
	cfg := k8sGatewayConfig(t)
	for _, l := range []string{config.ListenerXDS, config.ListenerExtProc, config.ListenerRateLimit} {
		p := cfg.Security.Listener(l)
		if !p.Mutual() || len(p.AllowedIdentities) == 0 || p.ServerIdentity == "" {
			t.Errorf("security.%s: want mutual TLS, allowed_identities and server_identity, got %+v", l, p)
		}
	}
	if len(cfg.Security.XDS.NodeGroups) == 0 || !cfg.Security.Envoy.Enabled() {
		t.Error("security.xds.node_groups and security.envoy must be set")
	}
	mounts := map[string]string{ // deployment -> directory the certificate must be in
		"swarmgate-xds": filepath.Dir(cfg.Security.TLS.CertFile), "swarmgate-extproc": filepath.Dir(cfg.Security.TLS.CertFile),
		"swarmgate-ratelimit": filepath.Dir(cfg.Security.TLS.CertFile), "swarmgate-envoy": filepath.Dir(cfg.Security.Envoy.CertFile),
	}
	certs := map[string]bool{} // secretName of every cert-manager Certificate
	for _, o := range k8sObjects(t) {
		if o.Kind == "Certificate" {
			var s struct {
				SecretName string `yaml:"secretName"`
			}
			if err := o.Spec.Decode(&s); err != nil {
				t.Fatal(err)
			}
			certs[s.SecretName] = true
		}
	}
	for _, o := range k8sObjects(t) {
		dir, ok := mounts[o.Metadata.Name]
		if o.Kind != "Deployment" || !ok {
			continue
		}
		d := decodeSpec[deploymentSpec](t, o)
		found := false
		for _, c := range d.Template.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if m.MountPath != dir {
					continue
				}
				for _, v := range d.Template.Spec.Volumes {
					if v.Name == m.Name && v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-tls") {
						found = true
						if !certs[v.Secret.SecretName] {
							t.Errorf("%s mounts Secret %s, which no Certificate issues", o.Metadata.Name, v.Secret.SecretName)
						}
					}
				}
			}
		}
		if !found {
			t.Errorf("%s mounts no certificate Secret at %s", o.Metadata.Name, dir)
		}
	}
}
