package trust

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// FleetProof decides whether a stream comes from the Envoy fleet: by its
// verified client certificate (an identity of Identities) or by the fleet
// secret in its gRPC metadata. With neither configured every stream passes:
// the default config listens on loopback only, and config validation
// refuses a non-loopback ext_proc listener without one of them.
type FleetProof struct {
	Identities []string
	// Secrets are the accepted fleet secrets: the current one and, during a
	// rotation, the previous one. Never logged.
	Secrets []string
	Logger  *slog.Logger
}

// Enabled reports whether streams must prove anything.
func (p *FleetProof) Enabled() bool { return p != nil && (len(p.Identities) > 0 || len(p.Secrets) > 0) }

// Check returns nil for a proven stream, else a gRPC status error
// (Unauthenticated: no proof; PermissionDenied: a certificate whose identity
// is not allowed). role is for the log line only.
func (p *FleetProof) Check(ctx context.Context, role string) error {
	if !p.Enabled() {
		return nil
	}
	cert := PeerCertificate(ctx)
	if len(p.Identities) > 0 && cert != nil {
		if _, ok := FirstMatch(cert, p.Identities); ok {
			return nil
		}
	}
	for _, v := range metadata.ValueFromIncomingContext(ctx, contract.GRPCFleetSecretHeader) {
		for _, want := range p.Secrets {
			// Constant time: the comparison must not tell how much of a
			// guess was right.
			if subtle.ConstantTimeCompare([]byte(v), []byte(want)) == 1 {
				return nil
			}
		}
	}
	addr := ""
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		addr = pr.Addr.String()
	}
	if p.Logger != nil {
		p.Logger.Warn("ext_proc stream refused: no proof it comes from the Envoy fleet", "peer", addr, "role", role, "identities", Describe(cert))
	}
	if cert != nil {
		return status.Error(codes.PermissionDenied, "client identity is not allowed on this listener")
	}
	return status.Error(codes.Unauthenticated, "this listener needs a client certificate of the Envoy fleet or the fleet secret")
}

// SwappableProof is a FleetProof that a config reload replaces (a new fleet
// secret, a changed allow-list) while streams are being checked.
type SwappableProof struct{ p atomic.Pointer[FleetProof] }

// NewSwappableProof starts with p.
func NewSwappableProof(p *FleetProof) *SwappableProof {
	s := &SwappableProof{}
	s.p.Store(p)
	return s
}

// Set replaces the proof.
func (s *SwappableProof) Set(p *FleetProof) { s.p.Store(p) }

// Check is the current proof's Check.
func (s *SwappableProof) Check(ctx context.Context, role string) error {
	return s.p.Load().Check(ctx, role)
}
