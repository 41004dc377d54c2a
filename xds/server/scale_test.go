package server

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// scaleYAML is a config of n models, each served by 3 backends of its own
// (priorities 0, 0, 1) with 20 keys each: n=1000 gives 3,000 backends and
// 60,000 keys (every key with rpm and tpm limits), plus 100 tenants.
func scaleYAML(n int, edit string) string {
	var b strings.Builder
	b.WriteString("retry: {num_retries: 3}\nbackends:\n")
	for m := 0; m < n; m++ {
		for j := 0; j < 3; j++ {
			fmt.Fprintf(&b, "  - name: b%d-%d\n    base_url: http://10.%d.%d.%d:8000/v1\n    keys:\n", m, j, j, m/250, m%250+1)
			for k := 0; k < 20; k++ {
				fmt.Fprintf(&b, "      - {id: k%d-%d-%d, secret: env:K, rpm: 500, tpm: 100000}\n", m, j, k)
			}
		}
	}
	b.WriteString("models:\n")
	for m := 0; m < n; m++ {
		fmt.Fprintf(&b, "  - name: model-%d%s\n    targets:\n", m, edit)
		fmt.Fprintf(&b, "      - {backend: b%d-0, weight: 3}\n      - {backend: b%d-1, weight: 1}\n      - {backend: b%d-2, priority: 1}\n", m, m, m)
	}
	b.WriteString("tenants:\n")
	for t := 0; t < 100; t++ {
		fmt.Fprintf(&b, "  - name: t%d\n    keys: [{id: t%d, hash: \"sha256:%064x\"}]\n    models: [\"*\"]\n    limits: {rpm: 100, rpd: 10000, tpm: 100000}\n", t, t, t+1)
	}
	return b.String()
}

// scaleModels: 1,000 with SWARMGATE_XDS_SCALE=1 (the figures in
// docs/xds.md), else a size that keeps the package's tests in seconds
// (smaller under -race, which slows protobuf encoding about tenfold).
func scaleModels() int {
	switch {
	case os.Getenv("SWARMGATE_XDS_SCALE") == "1":
		return 1000
	case raceEnabled:
		return 10
	}
	return 50
}

func BenchmarkTranslate1000(b *testing.B) {
	cfg := parseConfig(b, scaleYAML(1000, ""))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := translator.Translate(cfg)
		if err != nil {
			b.Fatal(err)
		}
		_ = translator.Endpoints(r.IR, translator.EndpointState{})
	}
}

func BenchmarkSetConfig1000(b *testing.B) {
	cfgs := []*config.Config{parseConfig(b, scaleYAML(1000, "")), parseConfig(b, scaleYAML(1000, "-v2"))}
	cp := New(Options{})
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := cp.SetConfig(cfgs[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkHealthPush1000(b *testing.B) {
	cp := New(Options{})
	if err := cp.SetConfig(parseConfig(b, scaleYAML(1000, ""))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		cp.setHealth(map[string]bool{fmt.Sprintf("b%d-0", i%1000): true}, nil, false)
		i++
	}
}

// TestPushLatencyConcurrentClients: 50 Envoy-like Delta clients subscribed to
// every cluster and endpoint; measures how long a config edit (every pool
// renamed: all CDS, EDS, RDS change) and a health change (EDS for one pool)
// take to reach all of them. 50 models by default (10 under -race);
// SWARMGATE_XDS_SCALE=1 runs 1,000 models × 3 backends × 20 keys.
func TestPushLatencyConcurrentClients(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	n := scaleModels()
	const clients = 50
	cfgA, cfgB := parseConfig(t, scaleYAML(n, "")), parseConfig(t, scaleYAML(n, "-v2"))
	health := newTestHealth()
	cp := New(Options{Health: health})
	start := time.Now()
	if err := cp.SetConfig(cfgA); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d models: first SetConfig %v", n, time.Since(start))
	cc := dial(t, startControlPlane(t, cp))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type event struct {
		client int
		typ    string
		names  int
		at     time.Time
	}
	events := make(chan event, clients*16)
	var ready sync.WaitGroup
	ready.Add(clients)
	for i := 0; i < clients; i++ {
		d := newDeltaClient(t, ctx, cc, envoyNode(fmt.Sprintf("envoy-%d", i)))
		go func(i int) {
			first := true
			for {
				r, err := d.recv()
				if err != nil {
					events <- event{i, "recv error: " + err.Error(), 0, time.Now()}
					return
				}
				if r.GetTypeUrl() == resource.ClusterType {
					var names []string
					for _, res := range r.GetResources() {
						names = append(names, res.GetName())
					}
					slices.Sort(names)
					if err := d.st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: names}); err != nil {
						events <- event{i, "send error: " + err.Error(), 0, time.Now()}
					}
					if first {
						first = false
						ready.Done()
						continue
					}
				}
				events <- event{i, r.GetTypeUrl(), len(r.GetResources()), time.Now()}
			}
		}(i)
	}
	ready.Wait()
	// await returns, for each (type, min resources) condition, when the
	// last client met it; every event is checked against every condition.
	type cond struct {
		typ  string
		want int
	}
	await := func(conds ...cond) []time.Time {
		got := make([]map[int]bool, len(conds))
		last := make([]time.Time, len(conds))
		for k := range got {
			got[k] = map[int]bool{}
		}
		done := func() bool {
			for k := range got {
				if len(got[k]) < clients {
					return false
				}
			}
			return true
		}
		for !done() {
			select {
			case e := <-events:
				for k, c := range conds {
					if e.typ == c.typ && e.names >= c.want && !got[k][e.client] {
						got[k][e.client] = true
						last[k] = e.at
					}
				}
			case <-ctx.Done():
				for k, c := range conds {
					t.Logf("%s >= %d: %d/%d clients", c.typ, c.want, len(got[k]), clients)
				}
				t.Fatal("not every client got the update")
			}
		}
		return last
	}
	await(cond{resource.EndpointType, n})

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc

	start = time.Now()
	if err := cp.SetConfig(cfgB); err != nil {
		t.Fatal(err)
	}
	set := time.Since(start)
	at := await(cond{resource.ClusterType, n}, cond{resource.EndpointType, n})
	cds, eds := at[0], at[1]
	t.Logf("config edit (%d pools replaced): SetConfig %v; CDS at all %d clients after %v, EDS after %v",
		n, set, clients, cds.Sub(start), eds.Sub(start))

	if f := os.Getenv("SWARMGATE_XDS_HEALTH_PROFILE"); f != "" {
		pf, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	var lat []time.Duration
	for i := range 5 {
		sent := health.set("b7-0", i%2 == 1)
		lat = append(lat, await(cond{resource.EndpointType, 1})[0].Sub(sent))
	}
	slices.Sort(lat)
	t.Logf("health change: EDS delta at all %d clients after min %v median %v max %v (5 changes)", clients, lat[0], lat[2], lat[4])

	runtime.ReadMemStats(&ms)
	t.Logf("heap in use with %d clients: %.1f MiB (before edit %.1f MiB)", clients, float64(ms.HeapAlloc)/(1<<20), float64(heapBefore)/(1<<20))
}
