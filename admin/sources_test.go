package admin

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/keypool"
)

// The key pool's snapshot converts to KeyState field for field; this stops
// compiling if the two drift apart.
func TestKeyStateConvertsFromKeypool(t *testing.T) {
	until := time.Now().Add(time.Minute)
	k := KeyState(keypool.KeyState{Backend: "b", KeyID: "k", State: "half-open", OpenUntil: until, Picks: 3})
	if k.Backend != "b" || k.KeyID != "k" || k.State != BreakerHalfOpen || !k.OpenUntil.Equal(until) || k.Picks != 3 {
		t.Errorf("converted %+v", k)
	}
}
