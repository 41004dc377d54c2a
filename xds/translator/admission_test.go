package translator

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/xds/ir"
)

// The router-level filter's max_message_timeout covers the longest
// admission wait plus the answer's own message_timeout.
func TestMaxMessageTimeoutCoversAdmissionWait(t *testing.T) {
	for _, tc := range []struct {
		wait, msg, want time.Duration
	}{
		{0, 2 * time.Second, 30 * time.Second},
		{10 * time.Second, 2 * time.Second, 30 * time.Second},
		{45 * time.Second, 2 * time.Second, 47 * time.Second},
		{20 * time.Minute, 5 * time.Second, 20*time.Minute + 5*time.Second},
	} {
		g := &ir.Gateway{MessageTimeout: tc.msg, AdmissionMaxWait: tc.wait}
		if got := RouterExtProc(g).GetMaxMessageTimeout().AsDuration(); got != tc.want {
			t.Errorf("wait %s, message_timeout %s: max_message_timeout %s, want %s", tc.wait, tc.msg, got, tc.want)
		}
	}
}
