package contract

import "testing"

// TestPoolCluster pins every pool kind's name: the xDS goldens and every
// running Envoy name clusters this way, so a change here is a migration.
func TestPoolCluster(t *testing.T) {
	const odd = "org/llama 3:70b" // replaced characters: a hash suffix
	tests := []struct {
		pool Pool
		want string
	}{
		{Pool{Alias: "gpt-4o"}, "pool_gpt-4o"},
		{Pool{Alias: odd}, "pool_org_llama_3_70b_1bb534a2"},
		{Pool{Alias: "m", MinContext: 8000}, "poolctx8000_m"},
		{Pool{Alias: odd, MinContext: 8000}, "poolctx8000_org_llama_3_70b_1bb534a2"},
		{Pool{Alias: "m", Family: "responses"}, "poolfam_responses_m"},
		{Pool{Alias: "m", Family: "anthropic_messages", Native: true}, "poolnat_anthropic_messages_m"},
		{Pool{Alias: "m", Family: "responses", MinContext: 8000}, "poolfamctx8000_responses_m"},
		{Pool{Alias: odd, Family: "responses", Native: true, MinContext: 128001}, "poolnatctx128001_responses_org_llama_3_70b_1bb534a2"},
		{Pool{Alias: "m", Family: "responses", Native: true, Backend: "oai"}, "poolbk3_oai_m"},
		{Pool{Alias: odd, Backend: "oai_eu"}, "poolbk6_oai_eu_org_llama_3_70b_1bb534a2"},
		// Native without a family and a window of 0 are no restriction.
		{Pool{Alias: "m", Native: true}, "pool_m"},
		{Pool{Alias: "m", MinContext: -1}, "pool_m"},
	}
	for _, tt := range tests {
		if got := tt.pool.Cluster(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.pool, got, tt.want)
		}
	}
}
