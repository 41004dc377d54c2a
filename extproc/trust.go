package extproc

import "context"

// StreamProof decides, before a stream's first message is read, whether the
// stream comes from the Envoy fleet (a verified client certificate of the
// fleet, or the fleet secret in its metadata: internal/trust.FleetProof).
// The role a stream names is its own claim; without a proof anyone who can
// reach the port could claim the upstream role and be handed provider keys.
type StreamProof interface {
	// Check returns a gRPC status error (Unauthenticated or
	// PermissionDenied) for a stream without a proof. role is for logs.
	Check(ctx context.Context, role string) error
}
