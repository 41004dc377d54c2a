package envoysim

import (
	"strings"
	"testing"
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// ToXDS output is what Envoy accepts (the differential suite shows it
// runs); here: validation reaches the typed configs inside, and FromXDS
// reads back what ToXDS wrote.
func TestToXDS(t *testing.T) {
	zero := 0
	cfg := Config{
		BufferLimit: 1024, RouteBufferLimit: 8192, UseRemoteAddress: true,
		RouterFilter: &Filter{Target: "127.0.0.1:9001", InitialMetadata: map[string]string{"role": "router"}, MessageTimeout: time.Second,
			Mode: modes(extprocfilter.ProcessingMode_BUFFERED, extprocfilter.ProcessingMode_STREAMED), ReceivingNamespaces: []string{"sg"}},
		Routes: []Route{
			{Name: "r", Headers: map[string]string{"x-pool": "a"}, Cluster: "c", Timeout: 30 * time.Second, AutoHostRewrite: true,
				Retry: &RetryPolicy{RetryOn: []string{"5xx", "retriable-status-codes"}, RetriableStatusCodes: []int{429}, NumRetries: 2,
					PreviousHosts: true, PreviousPriorities: true, BackoffBase: time.Millisecond, PerTryTimeout: time.Second,
					ResetHeaders: []ResetHeader{{Name: "retry-after", Format: "SECONDS"}}}},
			{Name: "d", DirectStatus: 404, DirectBody: "none"},
		},
		Clusters: []Cluster{{Name: "c", HealthyPanicThreshold: pct(0), RetryBudget: &RetryBudget{BudgetPercent: 50, MinRetryConcurrency: &zero},
			UpstreamFilter: &Filter{Target: "127.0.0.1:9001", InitialMetadata: map[string]string{"role": "upstream"}, Mode: modes(0, 0),
				RequestAttributes: []string{"upstream.request_attempt_count"}, ForwardingNamespaces: []string{"sg"}},
			Endpoints: []Endpoint{{Address: "127.0.0.1:9100", Hostname: "api.example", Metadata: map[string]map[string]string{"sg": {"b": "1"}}},
				{Address: "127.0.0.1:9101", Priority: 1, Unhealthy: true}}}},
	}
	x, err := ToXDS(cfg, XDSTarget{ListenerName: "l", Port: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := FromXDS(x.Listener, nil, x.Clusters, nil, XDSOptions{RoleHeader: "role"})
	if err != nil {
		t.Fatal(err)
	}
	got := s.cfg
	if got.BufferLimit != 1024 || got.RouteBufferLimit != 8192 || !got.UseRemoteAddress || len(got.Routes) != 2 ||
		got.Routes[0].Retry.NumRetries != 2 || !got.Routes[0].Retry.PreviousPriorities || got.Routes[1].DirectStatus != 404 {
		t.Errorf("read back %+v", got)
	}
	c := s.clusters["c"]
	if c == nil || len(c.Endpoints) != 2 || c.Endpoints[1].Priority != 1 || !c.Endpoints[1].Unhealthy || c.UpstreamFilter == nil ||
		c.UpstreamFilter.Target != "127.0.0.1:9001" || c.RetryBudget.BudgetPercent != 50 {
		t.Errorf("cluster read back %+v", c)
	}

	// A typed config inside an Any is validated too.
	cfg.RouterFilter.MaxMessageTimeout = 2 * time.Hour
	x, err = ToXDS(cfg, XDSTarget{ListenerName: "l", Port: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Validate(); err == nil || !strings.Contains(err.Error(), "MaxMessageTimeout") {
		t.Errorf("a max_message_timeout of 2h passed validation: %v", err)
	}
}
