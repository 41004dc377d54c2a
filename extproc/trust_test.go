package extproc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/trust"
)

// TestStreamWithoutProofIsRefused: whatever role a stream claims, without
// the fleet proof it is refused before its first message is processed, so
// it never sees an upstream credential.
func TestStreamWithoutProofIsRefused(t *testing.T) {
	const secret = "fleet-secret-for-tests-0123456789"
	h := newHarness(t, testConfig(t), func(o *extproc.Options) { o.Proof = &trust.FleetProof{Secrets: []string{secret}} })
	open := func(role, proof string) extprocv3.ExternalProcessor_ProcessClient {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		ctx = metadata.AppendToOutgoingContext(ctx, contract.GRPCRoleHeader, role)
		if proof != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, contract.GRPCFleetSecretHeader, proof)
		}
		st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// A proven router-level stream admits a request; its metadata is what
	// Envoy forwards to the attempt.
	rt := open(contract.RoleRouter, secret)
	roundTrip(t, rt, reqHeaders(false, chatHeaders(keyAlpha)...))
	md := roundTrip(t, rt, reqBody(chatBody)).GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
	if md == nil {
		t.Fatal("a proven router stream admitted nothing")
	}
	for _, tt := range []struct {
		name, role, proof string
		want              codes.Code
	}{
		{"upstream role, no proof", contract.RoleUpstream, "", codes.Unauthenticated},
		{"upstream role, wrong secret", contract.RoleUpstream, strings.ToUpper(secret), codes.Unauthenticated},
		{"router role, no proof", contract.RoleRouter, "", codes.Unauthenticated},
		{"unknown role, no proof", "admin", "", codes.Unauthenticated},
		{"upstream role with the fleet secret", contract.RoleUpstream, secret, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := open(tt.role, tt.proof)
			// Send may succeed (it only queues); the answer must be the
			// refusal, never a ProcessingResponse with a credential.
			_ = st.Send(upstreamReq(t, "small", "chat", 1, false, md, routedHeaders()...))
			resp, err := st.Recv()
			if tt.want == codes.OK {
				if err != nil {
					t.Fatalf("proven stream refused: %v", err)
				}
				if got := setOf(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation())["api-key"]; !strings.HasPrefix(got, "upstream-small-") {
					t.Fatalf("no credential for a proven stream: %v", resp)
				}
				return
			}
			if status.Code(err) != tt.want || resp != nil {
				t.Fatalf("got %v, %v; want %v and no response", resp, err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatal("refusal echoes the secret")
			}
		})
	}
}
