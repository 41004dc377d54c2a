package loadgen

import (
	"context"
	"net"
	"testing"
	"time"
)

// startTarget serves the named target in-process on 127.0.0.1:0.
func startTarget(t *testing.T, kind string, o TargetOptions) string {
	t.Helper()
	gs, cleanup, err := NewTarget(kind, o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); cleanup() })
	return lis.Addr().String()
}

// TestSmoke runs a few hundred requests against both targets and checks
// the counts, the percentiles' order, and that only swarmgate did work.
func TestSmoke(t *testing.T) {
	tests := []struct {
		target string
		sc     Scenario
		rate   float64
		works  bool
	}{
		{TargetBaseline, Scenario{Kind: "sse", ResponseBytes: 512}, 0, false},
		{TargetSwarmgate, Scenario{Kind: "sse", ResponseBytes: 512}, 0, true},
		{TargetSwarmgate, Scenario{Kind: "json"}, 0, true},
		{TargetSwarmgate, Scenario{Kind: "json", RenameModel: true}, 1000, true},
	}
	for _, tc := range tests {
		name := tc.target + "/" + tc.sc.Kind
		if tc.sc.RenameModel {
			name += "/renamed"
		}
		t.Run(name, func(t *testing.T) {
			addr := startTarget(t, tc.target, TargetOptions{RenameModel: tc.sc.RenameModel})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := Run(ctx, Options{Addr: addr, Label: tc.target, Scenario: tc.sc, Streams: 8, Rate: tc.rate,
				Warmup: 50 * time.Millisecond, Duration: 15 * time.Second, Requests: smokeRequests})
			if err != nil {
				t.Fatal(err)
			}
			checkSane(t, r)
			w := r.Work
			if !tc.works {
				if w != (Work{}) {
					t.Errorf("baseline did work: %+v", w)
				}
				return
			}
			if w.Routed != r.Requests || w.Credentials != r.Requests || w.Tagged != r.Requests || w.Usage != r.Requests {
				t.Errorf("work %+v over %d requests: every request must be routed, credentialed, tagged and accounted", w, r.Requests)
			}
			if tc.sc.RenameModel != (w.BodyRewrite == r.Requests) {
				t.Errorf("body rewrites %d over %d requests, rename %v", w.BodyRewrite, r.Requests, tc.sc.RenameModel)
			}
		})
	}
}

func checkSane(t *testing.T, r *Result) {
	t.Helper()
	if r.Errors != 0 || r.Refused != 0 {
		t.Fatalf("%d errors (first: %s), %d refused", r.Errors, r.FirstError, r.Refused)
	}
	if r.Requests < smokeRequests {
		t.Fatalf("only %d requests in %.2fs", r.Requests, r.Seconds)
	}
	x := newExchange(r.Scenario)
	perRequest := uint64(5 + len(x.chunks)) // 2 request, 2 upstream, 1 response headers, chunks
	if r.Work.BodyRewrite > 0 {
		perRequest++
	}
	if r.Messages != r.Requests*perRequest || r.Message.Count != r.Messages || r.Request.Count != r.Requests {
		t.Errorf("%d requests, %d messages (%d counted), want %d messages per request", r.Requests, r.Messages, r.Message.Count, perRequest)
	}
	for _, s := range []Summary{r.Message, r.Request} {
		if !(s.MinUS > 0 && s.MinUS <= s.P50US && s.P50US <= s.P90US && s.P90US <= s.P99US && s.P99US <= s.P999US && s.P999US <= s.MaxUS) {
			t.Errorf("percentiles out of order: %+v", s)
		}
	}
	if r.Request.P50US < r.Message.P50US {
		t.Errorf("request p50 %.1fµs below message p50 %.1fµs", r.Request.P50US, r.Message.P50US)
	}
	if r.RPS <= 0 || r.Server.PeakRSSMB <= 0 || r.Server.CPUSeconds <= 0 {
		t.Errorf("rps %.1f, server %+v", r.RPS, r.Server)
	}
	if r.PeakInFlight <= 0 || r.PeakInFlight > int64(r.Streams) {
		t.Errorf("peak in flight %d with %d streams", r.PeakInFlight, r.Streams)
	}
}

func TestFlightPeak(t *testing.T) {
	var f flight
	f.enter()
	f.enter() // 2 in flight before measuring
	f.startPeak()
	if p := f.peak.Load(); p != 2 {
		t.Fatalf("peak at start %d, want the 2 already in flight", p)
	}
	f.enter() // 3
	f.leave()
	f.leave()
	f.enter() // 2 again: the peak stays 3
	if p := f.stopPeak(); p != 3 {
		t.Errorf("peak %d, want 3", p)
	}
	f.enter() // after stopPeak: not counted
	f.enter()
	if p := f.peak.Load(); p != 3 {
		t.Errorf("peak moved to %d after stopPeak", p)
	}
}
