package envoysim

import (
	"net"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// slowBody answers the request body late, after sending overrides first:
// what swarmgate's admission queue does while a request waits.
type slowBody struct {
	extprocv3.UnimplementedExternalProcessorServer
	overrides []time.Duration
	delay     time.Duration
}

func (p *slowBody) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if req.GetRequestBody() != nil {
			for _, d := range p.overrides {
				if err := st.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)}); err != nil {
					return nil
				}
			}
			// The server's own processing time is the behaviour under test.
			select {
			case <-time.After(p.delay):
			case <-st.Context().Done():
				return nil
			}
		}
		if err := st.Send(pass(req)); err != nil {
			return nil
		}
	}
}

// Behaviour: override_message_timeout (ext_proc.cc Filter::onReceiveMessage
// and Filter::onNewTimeout; processor_state.cc
// ProcessorState::restartMessageTimer, v1.38.0). A ProcessingResponse with
// only override_message_timeout restarts the current message's timer with
// the new value when it is within [1ms, max_message_timeout]; only the
// first one per message counts (new_timeout_received_). A message that
// times out is a 504 (Filter::onMessageTimeout).
func TestOverrideMessageTimeout(t *testing.T) {
	// Margins hold on a loaded machine: the override must arrive within msg.
	const msg, answerAfter = 200 * time.Millisecond, 600 * time.Millisecond
	tests := []struct {
		name      string
		overrides []time.Duration
		max       time.Duration
		want      int
	}{
		{name: "no override: the message times out", want: 504},
		{name: "one override within the max extends the timer", overrides: []time.Duration{3 * time.Second}, max: 5 * time.Second, want: 200},
		{name: "an override above max_message_timeout is ignored", overrides: []time.Duration{3 * time.Second}, max: time.Second, want: 504},
		{name: "max_message_timeout unset disables overrides", overrides: []time.Duration{3 * time.Second}, want: 504},
		{name: "only the first override per message counts", overrides: []time.Duration{msg, 3 * time.Second}, max: 5 * time.Second, want: 504},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := startScripted2(t, &slowBody{overrides: tc.overrides, delay: answerAfter})
			up := newUpstream(t, func(int) int { return 200 })
			rf := routerFilter(addr)
			rf.MessageTimeout, rf.MaxMessageTimeout = msg, tc.max
			s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c"}}, RouterFilter: rf,
				Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: up.addr()}}}}})
			resp, _ := do(t, s, nil, "b")
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d (stats %+v)", resp.StatusCode, tc.want, s.Stats())
			}
		})
	}
}

func startScripted2(t *testing.T, p extprocv3.ExternalProcessorServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
