package server

import (
	"context"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// A SotW client that rejects a response is not sent it again until the
// config changes: its NACK names the last version it accepted (none
// here), which the cache took for a client behind and answered with the
// same rejected resources at once, in a loop (15,760 resends a second).
func TestSotWNackIsNotResent(t *testing.T) {
	cp := New(Options{})
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(map[string][]string{"m": {"a@127.0.0.1:9001,1,0"}}))); err != nil {
		t.Fatal(err)
	}
	cc := dial(t, startControlPlane(t, cp))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode("e1"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *discoveryv3.DiscoveryResponse, 64)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- r
		}
	}()
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: first.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "secret env:NEW_KEY not set"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		t.Fatalf("the rejected version %s was sent again (%s)", first.GetVersionInfo(), r.GetVersionInfo())
	case <-time.After(500 * time.Millisecond):
	}
	// A new config reaches the client that rejected the last one.
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(map[string][]string{"m": {"a@127.0.0.1:9001,1,0"}, "m2": {"a@127.0.0.1:9001,1,0"}}))); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.GetVersionInfo() == first.GetVersionInfo() {
			t.Fatalf("sent the rejected version again, not the new one")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the new config never reached the client that rejected the last one")
	}
}
