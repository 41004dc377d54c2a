package e2e

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
	"github.com/swarmgate/swarmgate/test/envoysim"
)

func mockupstreamRateLimited() mockupstream.Behavior {
	return mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 30 * time.Second}
}

func mockupstreamResetMidStream() mockupstream.Behavior {
	return mockupstream.Behavior{Action: mockupstream.ActResetMidStream, ResetAfterChunks: 3}
}

// waitRecord is the sim's record of a request, found by the id the client
// sent (Envoy replaces it on edge requests); the record is written when the
// stream is destroyed, possibly after the client has its answer.
func waitRecord(t *testing.T, sim *envoysim.Sim, id string) (envoysim.Record, bool) {
	t.Helper()
	return sim.AwaitRecord(id, 5*time.Second)
}
