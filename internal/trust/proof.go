package trust

import (
	"context"
	"crypto/subtle"
	"log/slog"

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
	Secret     string // never logged
	Logger     *slog.Logger
}

// Enabled reports whether streams must prove anything.
func (p *FleetProof) Enabled() bool { return p != nil && (len(p.Identities) > 0 || p.Secret != "") }

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
	if p.Secret != "" {
		for _, v := range metadata.ValueFromIncomingContext(ctx, contract.GRPCFleetSecretHeader) {
			if subtle.ConstantTimeCompare([]byte(v), []byte(p.Secret)) == 1 {
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
