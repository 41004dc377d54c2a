package gateway

import (
	"context"
	"testing"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// The sub-keys check fails until the store's first load, and takes the
// replica out of rotation only when Redis's own policy says so.
func TestSubkeysLoadedFollowsRedisPolicy(t *testing.T) {
	store := subkey.NewStore(nil, "sg:", nil) // never run: never loaded
	for _, required := range []bool{true, false} {
		c := subkeysLoaded(store, func() (bool, string) { return required, "policy" })
		if err := c.Check(context.Background()); err == nil {
			t.Fatal("check passed before the first load")
		}
		if got, _ := c.Policy(); got != required {
			t.Errorf("required %v, want %v (Redis's policy)", got, required)
		}
	}
}
