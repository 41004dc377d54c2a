package envoybench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/test/bench/loadgen"
)

// slices per path and point: the two paths alternate (plain, swarmgate;
// then swarmgate, plain; …) so a shared machine's drift in speed falls on
// both alike.
const slicesPerPath = 4

// requestBody is an agent's chat completion of about 2 KB; streamed ones
// ask for usage (as swarmgate would otherwise inject it), so both paths
// carry the same bytes.
func requestBody(stream bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]`,
		model, "You are one agent of a swarm working on a repository. "+strings.Repeat("Follow the plan; report tool results briefly. ", 20),
		strings.Repeat("Read the failing test's output and propose the next edit. ", 16))
	if stream {
		b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	b.WriteString("}")
	return b.Bytes()
}

// path is one way through Envoy.
type path struct {
	name, url, key string
	hc             *http.Client
}

// sample is one slice of requests on one path.
type sample struct {
	lat             []time.Duration
	errs            int
	firstErr        string
	envoyCPU, sgCPU time.Duration
	selfCPU         time.Duration // this process: the clients and the relay
}

// BenchmarkEnvoy: b.N requests per path at each point (use -benchtime
// Nx), 64 and 1,000 concurrent clients, JSON and SSE. Metrics: latency
// percentiles per path and what swarmgate adds, CPU per request of Envoy
// on each path and of the swarmgate process.
func BenchmarkEnvoy(b *testing.B) {
	s := startBench(b)
	b.Logf("Envoy %s (default concurrency: one worker per core), swarmgate serve as its own process; service cluster breakers raised: %v",
		s.envoy.Version, os.Getenv("ENVOY_BENCH_STOCK") != "1")
	for _, kind := range []string{"json", "sse"} {
		for _, conc := range []int{64, 1000} {
			b.Run(fmt.Sprintf("%s/conc=%d", kind, conc), func(b *testing.B) {
				benchPoint(b, s, point{stream: kind == "sse", conc: conc})
			})
		}
		// Closed loops saturate this machine, so their latency is mostly
		// queueing behind the CPU either path uses; 64 clients waiting
		// 500 ms between requests (about 130 requests/s) keep it below
		// saturation, where the latency added is the path's own. At most
		// 1,000 requests per path: the point is paced, not long.
		b.Run(fmt.Sprintf("%s/conc=64/think=500ms", kind), func(b *testing.B) {
			benchPoint(b, s, point{stream: kind == "sse", conc: 64, think: 500 * time.Millisecond, capped: true})
		})
		// One client, one request at a time: the latency floor of each
		// path on this machine as loaded as it is (capped as above).
		b.Run(fmt.Sprintf("%s/conc=1", kind), func(b *testing.B) {
			benchPoint(b, s, point{stream: kind == "sse", conc: 1, capped: true})
		})
	}
}

// point is one load shape: conc clients in a closed loop, each waiting
// think between requests; a capped point sends at most 1,000 requests
// per path whatever b.N is.
type point struct {
	stream bool
	conc   int
	think  time.Duration
	capped bool
}

func benchPoint(b *testing.B, s *benchStack, pt point) {
	stream, conc, think := pt.stream, pt.conc, pt.think
	body := requestBody(stream)
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc, DisableCompression: true}}
	}
	plain := path{name: "plain", url: s.plainURL, key: relaySecret(0), hc: newClient()}
	sg := path{name: "swarmgate", url: s.sgURL, key: virtualKey, hc: newClient()}
	defer plain.hc.CloseIdleConnections()
	defer sg.hc.CloseIdleConnections()
	// Warm-up: every client connection opened, Envoy's upstream pools
	// filled, swarmgate's streams and caches warm.
	for _, p := range []path{plain, sg} {
		if w := run(s, p, body, stream, 2*conc, conc, 0); w.errs > 0 {
			b.Fatalf("warm-up on %s: %d of %d requests failed, first: %s\nEnvoy's overflow counters:\n%s", p.name, w.errs, 2*conc, w.firstErr, s.overflowStats())
		}
	}
	n := b.N
	if pt.capped {
		n = min(n, 1000)
	}
	per := max(n/slicesPerPath, 1)
	var tot [2]sample
	b.ResetTimer()
	for i := range slicesPerPath {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, j := range order {
			p := []path{plain, sg}[j]
			r := run(s, p, body, stream, per, conc, think)
			t := &tot[j]
			t.lat = append(t.lat, r.lat...)
			t.errs += r.errs
			if t.firstErr == "" {
				t.firstErr = r.firstErr
			}
			t.envoyCPU += r.envoyCPU
			t.sgCPU += r.sgCPU
			t.selfCPU += r.selfCPU
		}
	}
	b.StopTimer()
	pl, sw := tot[0], tot[1]
	for j, t := range tot {
		if t.errs > 0 {
			b.Errorf("%s: %d of %d requests failed, first: %s\nEnvoy's overflow counters:\n%s", []string{"plain", "swarmgate"}[j], t.errs, len(t.lat)+t.errs, t.firstErr, s.overflowStats())
		}
	}
	slices.Sort(pl.lat)
	slices.Sort(sw.lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	us := func(d time.Duration, n int) float64 {
		return float64(d) / float64(time.Microsecond) / float64(max(n, 1))
	}
	np, ns := len(pl.lat)+pl.errs, len(sw.lat)+sw.errs
	m := map[string]float64{
		"plain-p50-ms": ms(pct(pl.lat, 0.50)), "plain-p99-ms": ms(pct(pl.lat, 0.99)),
		"sg-p50-ms": ms(pct(sw.lat, 0.50)), "sg-p99-ms": ms(pct(sw.lat, 0.99)),
		"added-p50-ms": ms(pct(sw.lat, 0.50) - pct(pl.lat, 0.50)), "added-p99-ms": ms(pct(sw.lat, 0.99) - pct(pl.lat, 0.99)),
		"envoy-plain-us/req": us(pl.envoyCPU, np), "envoy-sg-us/req": us(sw.envoyCPU, ns),
		"swarmgate-us/req": us(sw.sgCPU, ns), "client-us/req": us(sw.selfCPU, ns),
	}
	m["sg/envoy-cpu"] = m["swarmgate-us/req"] / math.Max(m["envoy-sg-us/req"], 1e-9)
	for k, v := range m {
		b.ReportMetric(v, k)
	}
	b.Logf("| %s | %d, think %v | %d | %.2f / %.2f | %.2f / %.2f | %+.2f / %+.2f | %.0f | %.0f | %.0f | %.2f | %.0f |",
		map[bool]string{false: "JSON", true: "SSE"}[stream], conc, think, len(sw.lat), m["plain-p50-ms"], m["plain-p99-ms"], m["sg-p50-ms"], m["sg-p99-ms"],
		m["added-p50-ms"], m["added-p99-ms"], m["envoy-plain-us/req"], m["envoy-sg-us/req"], m["swarmgate-us/req"], m["sg/envoy-cpu"], m["client-us/req"])
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(int(math.Ceil(p*float64(len(d))))-1, len(d)-1)]
}

// run sends n requests on p from conc clients in a closed loop (each
// client waiting think after each answer) and reads the processes' CPU
// over the slice.
func run(s *benchStack, p path, body []byte, stream bool, n, conc int, think time.Duration) sample {
	var out sample
	e0, g0, c0 := cpuOf(s.envoyPID), cpuOf(s.swarmgatePID), selfCPU()
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			var lat []time.Duration
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				err := do(p, body, stream)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					out.errs++
					if out.firstErr == "" {
						out.firstErr = err.Error()
					}
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
				time.Sleep(think)
			}
			mu.Lock()
			out.lat = append(out.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	out.envoyCPU, out.sgCPU, out.selfCPU = cpuOf(s.envoyPID)-e0, cpuOf(s.swarmgatePID)-g0, selfCPU()-c0
	return out
}

// do sends one chat completion and reads the whole answer.
func do(p path, body []byte, stream bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("authorization", "Bearer "+p.key)
	req.Header.Set("content-type", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, got)
	}
	if stream && !bytes.Contains(got, []byte("data: [DONE]")) {
		return fmt.Errorf("stream without [DONE]: %.200s", got)
	}
	if !stream && !bytes.Contains(got, []byte(`"usage"`)) {
		return fmt.Errorf("answer without usage: %.200s", got)
	}
	return nil
}

func cpuOf(pid int) time.Duration {
	ps, err := loadgen.ReadProc(pid)
	if err != nil {
		return 0
	}
	return ps.CPU
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
