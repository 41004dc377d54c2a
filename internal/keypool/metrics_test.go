package keypool

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsAndNoSecretLeaks(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false), map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	l := pick(t, p, "b", PickRequest{Attempt: 1})
	if l.Secret.Value() != "sk-a" {
		t.Fatalf("lease secret %q", l.Secret.Ref())
	}
	l.Done(status(200))
	for range 3 {
		_ = p.Report(t.Context(), "b", "a", "r", status(429))
	}
	p.refresh()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
				if strings.Contains(lp.GetValue(), "sk-") {
					t.Fatalf("secret in label %s", f.GetName())
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for name, want := range map[string]float64{
		"swarmgate_keypool_picks_total{backend=b,key=a}":                    1,
		"swarmgate_keypool_breaker_state{backend=b,key=a}":                  1,
		"swarmgate_keypool_breaker_trips_total{backend=b,key=a,reason=429}": 1,
		"swarmgate_keypool_backend_healthy{backend=b}":                      1,
		"swarmgate_keypool_in_flight{backend=b,key=a}":                      0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	snap, _ := json.Marshal(p.Snapshot())
	if bytes.Contains(snap, []byte("sk-")) || bytes.Contains(logs.Bytes(), []byte("sk-")) {
		t.Fatalf("secret in snapshot or logs:\n%s\n%s", snap, logs.String())
	}
	if !strings.Contains(logs.String(), "key opened") {
		t.Fatalf("no trip log line: %s", logs.String())
	}
}
