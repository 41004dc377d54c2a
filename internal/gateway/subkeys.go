package gateway

import (
	"context"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// subkeys keeps this process's copy of the sub-keys current
// (subkeys.enabled): it loads every key from Redis, then follows the
// change channel, reloading whenever its subscription is re-established.
// ext_proc authenticates from the copy and never waits on Redis.
type subkeys struct{ store *subkey.Store }

func (k *subkeys) Run(ctx context.Context) error { return k.store.Run(ctx) }

// startSubkeys starts the sub-key store when the first config enables it
// (nil otherwise). Read once: a reload neither starts nor stops it.
func (g *Gateway) startSubkeys(s *group, p *process) *subkey.Store {
	if !p.cfg.Subkeys.Enabled {
		return nil
	}
	store := subkey.NewStore(p.rdb, p.cfg.Subkeys.RedisPrefix, g.log.With("component", "subkey"))
	store.SetRetention(p.cfg.Subkeys.Retention.D())
	s.start(&subkeys{store})
	return store
}
