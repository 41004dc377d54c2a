package keypool

// Pace is the request rate (per second) the usable keys of backends can
// take: the sum of their configured rpm over keys that are not open. 0
// when no usable key has an rpm (the admission queue then admits whenever a
// key is available, unpaced). Keys whose breaker is open add nothing, so a
// key that trips slows the pace at once and one that reopens adds its
// share back without a burst: the admission order spaces requests at the
// new rate across every replica.
func (p *Pools) Pace(backends []string) float64 {
	now := p.clock.Now()
	rpm := 0
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		kp.mu.Lock()
		if held, _ := kp.damper.heldDown(now); !held {
			for _, k := range kp.keys {
				if k.cfg.Weight > 0 && k.cfg.RPM > 0 && k.br.State(now) != Open {
					rpm += k.cfg.RPM
				}
			}
		}
		kp.mu.Unlock()
	}
	return float64(rpm) / 60
}
