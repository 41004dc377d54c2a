package telemetry

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swarmgate/swarmgate/internal/config"
)

const testConfigYAML = `
backends:
  - name: b1
    base_url: http://127.0.0.1:1/v1
    keys: [{id: b1-k1, secret: env:T_KEY}]
  - name: b2
    base_url: http://127.0.0.1:2/v1
    keys: [{id: b2-k1, secret: env:T_KEY}]
models:
  - name: m1
    targets: [{backend: b1}]
  - name: m2
    targets: [{backend: b2}]
tenants:
  - name: alpha
    keys: [{id: a1, hash: "sha256:0000000000000000000000000000000000000000000000000000000000000001"}]
    models: ["*"]
  - name: beta
    keys: [{id: b1, hash: "sha256:0000000000000000000000000000000000000000000000000000000000000002"}]
    models: ["*"]
`

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfigYAML), "test.yaml", config.Options{
		LookupEnv: func(string) (string, bool) { return "sk-test-value-0001", true },
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// scrape serves reg on a real loopback listener, scrapes it once over HTTP
// and parses the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+lis.Addr().String()+"/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// series finds the metric of family name whose labels are exactly want.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("family %s not exported", name)
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				match = false
				break
			}
		}
		if match {
			return m
		}
	}
	t.Fatalf("%s%v: no such series", name, want)
	return nil
}

func seriesCount(fams map[string]*dto.MetricFamily, name string) int {
	return len(fams[name].GetMetric())
}
