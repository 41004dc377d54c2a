package keypool

import (
	"slices"
	"time"
)

// KeyState is one key's state for the admin API. It holds no secret.
type KeyState struct {
	Backend        string    `json:"backend"`
	KeyID          string    `json:"key_id"`
	Weight         int       `json:"weight"`
	State          string    `json:"state"`
	Reason         string    `json:"reason,omitempty"`
	Consecutive429 int       `json:"consecutive_429"`
	Consecutive5xx int       `json:"consecutive_5xx"`
	Trips          int       `json:"trips"`
	OpenUntil      time.Time `json:"open_until,omitzero"`
	InFlight       int       `json:"in_flight"`
	Picks          uint64    `json:"picks"`
	LastStatus     int       `json:"last_status"`
}

// Snapshot lists every key's state, sorted by backend then config order.
func (p *Pools) Snapshot() []KeyState {
	now := p.clock.Now()
	pools := *p.pools.Load()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []KeyState
	for _, n := range names {
		kp := pools[n]
		kp.mu.Lock()
		for _, k := range kp.keys {
			out = append(out, KeyState{
				Backend: n, KeyID: k.cfg.ID, Weight: k.cfg.Weight,
				State: k.br.State(now).String(), Reason: string(k.br.reason),
				Consecutive429: k.br.fails429, Consecutive5xx: k.br.fails5xx, Trips: k.br.trips,
				OpenUntil: k.br.OpenUntil(), InFlight: k.inFlight, Picks: k.picks, LastStatus: k.lastStatus,
			})
		}
		kp.mu.Unlock()
	}
	return out
}
