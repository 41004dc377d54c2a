package e2e

import (
	"time"

	"github.com/swarmgate/swarmgate/mockupstream"
)

func mockupstreamRateLimited() mockupstream.Behavior {
	return mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 30 * time.Second}
}

func mockupstreamResetMidStream() mockupstream.Behavior {
	return mockupstream.Behavior{Action: mockupstream.ActResetMidStream, ResetAfterChunks: 3}
}
