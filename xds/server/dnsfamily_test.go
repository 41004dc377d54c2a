package server

import (
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestDNSLookupFamily: a backend name that resolves to IPv4 and IPv6
// addresses reaches EDS with the family envoy.dns_lookup_family picks
// (IPv4 by default: most deployments have no IPv6 route, and Envoy
// connects to whatever it is given); a reload that changes the family
// picks every name's addresses again.
func TestDNSLookupFamily(t *testing.T) {
	r := &gatedResolver{addrs: map[string][]string{"dual.test": {"192.0.2.1", "2001:db8::1", "192.0.2.2"}}}
	cp := New(Options{Resolver: r})
	base := gatewayYAML(map[string][]string{"m": {"a@dual.test:9001,1,0"}})
	addrs := func() []string {
		t.Helper()
		cp.mu.Lock()
		defer cp.mu.Unlock()
		var out []string
		cla := cp.snaps[cp.envoyGroup].types[resource.EndpointType].items["pool_m"].Resource.(*endpointv3.ClusterLoadAssignment)
		for _, loc := range cla.GetEndpoints() {
			for _, e := range loc.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		family string // "" leaves the default
		want   []string
	}{
		{"", []string{"192.0.2.1", "192.0.2.2"}},
		{"v6_preferred", []string{"2001:db8::1"}},
		{"all", []string{"192.0.2.1", "192.0.2.2", "2001:db8::1"}},
		{"v4_only", []string{"192.0.2.1", "192.0.2.2"}},
		{"v6_only", []string{"2001:db8::1"}},
	} {
		y := base
		if tc.family != "" {
			y += "envoy:\n  dns_lookup_family: " + tc.family + "\n"
		}
		if err := cp.SetConfig(parseConfig(t, y)); err != nil {
			t.Fatal(err)
		}
		if got := addrs(); !slices.Equal(got, tc.want) {
			t.Errorf("family %q: EDS addresses %v, want %v", tc.family, got, tc.want)
		}
	}
}

// TestDNSFamilyWithoutAnswer: a name that answers, but with no address of
// the family, has none in EDS; the previous answer (of another family) is
// not kept as if the lookup had failed.
func TestDNSFamilyWithoutAnswer(t *testing.T) {
	r := &gatedResolver{addrs: map[string][]string{"v4.test": {"192.0.2.9"}}}
	cp := New(Options{Resolver: r})
	cp.state.Addrs = map[string][]string{"v4.test": {"192.0.2.9"}}
	got := cp.resolveAll(t.Context(), []string{"v4.test"}, "v6_only")
	if a, ok := got["v4.test"]; !ok || len(a) != 0 {
		t.Fatalf("v6_only on an IPv4-only name: %v (present %v), want no address", a, ok)
	}
}
