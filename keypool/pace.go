package keypool

import "time"

// Pace is the rate the usable keys of backends can take: requests and
// tokens per second, the sums of their per-minute limits (the lower of the
// configured rpm/tpm and the limits the provider states on its answers,
// limits.go) over the keys that are serving. 0 when a serving key has no
// such limit (it can take more than any sum says) or none serves: the
// admission queue then does not pace by it. Keys that
// trip add nothing, so a failing key slows the pace at once and one that
// comes back adds its share back without a burst: the admission order
// spaces requests at the new rate across every replica.
func (p *Pools) Pace(backends []string) (requests, tokens float64) {
	now := p.clock.Now()
	rpm, tpm := 0, 0
	rpmUnknown, tpmUnknown := false, false
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		kp.mu.Lock()
		if held, _ := kp.damper.heldDown(now); !held {
			for _, k := range kp.keys {
				if k.cfg.Weight > 0 && k.serving(now) {
					r, t := k.rpm(), k.tpm()
					rpm, tpm = rpm+r, tpm+t
					rpmUnknown, tpmUnknown = rpmUnknown || r == 0, tpmUnknown || t == 0
				}
			}
		}
		kp.mu.Unlock()
	}
	if rpmUnknown {
		rpm = 0
	}
	if tpmUnknown {
		tpm = 0
	}
	return paceShare * float64(rpm) / 60, paceShare * float64(tpm) / 60
}

// paceShare is the part of the stated limits the pace uses. Providers
// enforce per-minute limits in short quantized windows (OpenAI: a second),
// and each replica's key rotation spreads admitted requests over the keys
// only on average, so pacing at 100 % lets some key see one request more
// than its window holds: 2.7 % of upstream requests were 429s in the
// 500-agent TestSwarmOverCapacity run at 100 %.
const paceShare = 0.95

// serving reports whether the key is part of its backend's capacity now:
// not open, or open only until its provider window resets (ReasonQuota:
// remaining 0, or one 429 with Retry-After). Such a key is resting, not
// failing. Counting it out made providers' quantized windows (one second)
// flip the backend's EDS health every window, so the health damper held
// the backend down for whole seconds, and slowed the pace each time a key
// used its window (the GCRA spaces admissions at the rate in force when
// each was admitted, carrying the slowdown on after the key came back):
// about half the keys' capacity lost in TestSwarmOverCapacity. Keys open
// for failures, 429 streaks or refused credentials are out.
func (k *keyState) serving(now time.Time) bool {
	return k.br.State(now) != Open || k.br.reason == ReasonQuota
}
