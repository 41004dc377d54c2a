package e2eenvoy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// overrideBootstrap has a rate-limit filter whose filter-level rate_limits
// take RateLimit.limit from dynamic metadata beside hits_addend: what a
// sub-key's tpm descriptor would need to carry its limit natively.
const overrideBootstrap = `
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: 1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: x
          route_config:
            virtual_hosts:
            - {name: v, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200}}]}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: d
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: rls}}
              rate_limits:
              - actions:
                - metadata:
                    descriptor_key: subkey
                    metadata_key: {key: swarmgate, path: [{key: vkey}]}
                    source: DYNAMIC
                limit:
                  dynamic_metadata:
                    metadata_key: {key: swarmgate, path: [{key: subkey_tpm}]}
                hits_addend: {format: "%DYNAMIC_METADATA(swarmgate:est_tokens)%"}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: rls
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: rls
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
`

// TestFilterLevelLimitOverride pins why sub-key limits travel as a quota
// entry and not as RateLimit.limit: Envoy 1.38 refuses `limit` in the
// filter-level rate_limits (the only ones with hits_addend), and the
// whole listener with it; 1.39 and later accept it
// (docs/envoy-behaviour.md). When the oldest supported release accepts
// it, the quota entry can give way to the native override.
func TestFilterLevelLimitOverride(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		path := filepath.Join(t.TempDir(), "override.yaml")
		if err := os.WriteFile(path, []byte(overrideBootstrap), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(testCtx(t), r.Path, "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
		parts := strings.Split(r.Version, ".")
		minor, _ := strconv.Atoi(parts[min(1, len(parts)-1)])
		switch refused := err != nil; {
		case minor <= 38 && (!refused || !strings.Contains(string(out), "'limit' field is not supported")):
			t.Errorf("Envoy %s accepted the filter-level limit override (err %v): %s", r.Version, err, out)
		case minor > 38 && refused:
			t.Errorf("Envoy %s refused the filter-level limit override: %v: %s", r.Version, err, out)
		}
	})
}
