package translator

import (
	"bytes"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestTranslateValid(t *testing.T) {
	for _, name := range []string{"default.yaml", "mixed.yaml", "subkeys.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg := loadTestdata(t, name)
			r, err := Translate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps := Endpoints(r.IR, EndpointState{Addrs: map[string][]string{"api.openai.com": {"192.0.2.1"}, "relay.example.net": {"192.0.2.2"}}})
			if err := ValidateEndpoints(eps); err != nil {
				t.Fatal(err)
			}
			if err := Validate(GRPCListener()); err != nil {
				t.Fatal(err)
			}
			for _, c := range GRPCClusters(r) {
				if len(c.TransportSocketMatches) > 0 {
					t.Errorf("gRPC cluster %s has transport_socket_matches (grpc-go rejects them)", c.Name)
				}
			}
		})
	}
}

// TestDeterministic: the same config gives byte-identical resources (the
// version hash depends on it), across separate parses.
func TestDeterministic(t *testing.T) {
	marshal := func() [][]byte {
		r, err := Translate(loadTestdata(t, "mixed.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		opts := proto.MarshalOptions{Deterministic: true}
		for _, m := range []proto.Message{r.Listeners[0], r.Routes[0], r.RateLimit} {
			b, _ := opts.Marshal(m)
			out = append(out, b)
		}
		for _, c := range r.Clusters {
			b, _ := opts.Marshal(c)
			out = append(out, b)
		}
		for _, e := range Endpoints(r.IR, EndpointState{Addrs: goldenAddrs}) {
			b, _ := opts.Marshal(e)
			out = append(out, b)
		}
		return out
	}
	first := marshal()
	for range 5 {
		again := marshal()
		if len(again) != len(first) {
			t.Fatal("resource count changed")
		}
		for i := range first {
			if !bytes.Equal(first[i], again[i]) {
				t.Fatalf("resource %d differs between two translations of the same config", i)
			}
		}
	}
}

// TestValidateDescendsIntoAny: a broken typed_config deep inside a cluster
// is reported (ValidateAll alone would accept it).
func TestValidateDescendsIntoAny(t *testing.T) {
	r, err := Translate(loadTestdata(t, "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := proto.Clone(r.Clusters[0]).(*clusterv3.Cluster)
	if err := c.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	bad := &extprocv3.ExternalProcessor{MessageTimeout: durationpb.New(2 * time.Hour)} // max 3600s
	opts := &httpv3.HttpProtocolOptions{}
	if err := c.TypedExtensionProtocolOptions[HTTPOptionsKey].UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	opts.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(bad)}
	c.TypedExtensionProtocolOptions[HTTPOptionsKey] = mustAny(opts)
	if err := c.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll now sees into Any? %v", err)
	}
	if err := Validate(c); err == nil || !strings.Contains(err.Error(), "MessageTimeout") {
		t.Fatalf("Validate missed the broken ext_proc filter: %v", err)
	}
}

// TestUpstreamTLSServerName: a backend named by host is verified against
// a DNS SAN and sent as SNI; one addressed by an IP is verified against an
// IP SAN and sends no SNI (RFC 6066 allows host names only). A DNS SAN
// matcher never matches a certificate's IP SAN in Envoy, so every
// handshake to an IP-addressed backend failed.
func TestUpstreamTLSServerName(t *testing.T) {
	for _, tc := range []struct {
		name, sni, san string
		typ            tlsv3.SubjectAltNameMatcher_SanType
	}{
		{"api.openai.com", "api.openai.com", "api.openai.com", tlsv3.SubjectAltNameMatcher_DNS},
		{"10.0.0.5", "", "10.0.0.5", tlsv3.SubjectAltNameMatcher_IP_ADDRESS},
		{"2001:db8::1", "", "2001:db8::1", tlsv3.SubjectAltNameMatcher_IP_ADDRESS},
		{"[2001:db8::1]", "", "2001:db8::1", tlsv3.SubjectAltNameMatcher_IP_ADDRESS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tc3 tlsv3.UpstreamTlsContext
			if err := UpstreamTLS(tc.name, "", false).GetTypedConfig().UnmarshalTo(&tc3); err != nil {
				t.Fatal(err)
			}
			m := tc3.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames()
			if tc3.GetSni() != tc.sni || len(m) != 1 || m[0].GetSanType() != tc.typ || m[0].GetMatcher().GetExact() != tc.san {
				t.Errorf("sni %q, san %v; want sni %q, %v %q", tc3.GetSni(), m, tc.sni, tc.typ, tc.san)
			}
			if err := tc3.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}
