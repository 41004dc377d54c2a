package config

import (
	"fmt"
	"strings"
	"time"
)

// validateAdmission checks the admission queue. Every maximum wait plus
// request.message_timeout (the answer still needs its own time after the
// wait) must fit in Envoy's max_message_timeout, which the ext_proc filter
// bounds at 1h (ext_proc.proto max_message_timeout lte 3600s): the wait is
// held open with one override_message_timeout, which Envoy ignores above
// that bound and the request would then fail on the message timer.
func (c *Config) validateAdmission(v *validator) {
	a := &c.Admission
	limit := MaxMessageTimeout - c.Request.MessageTimeout.Duration
	wait := func(path string, d Duration) {
		switch {
		case d.Duration < 0:
			v.add(path, "must not be negative")
		case d.Duration > limit:
			v.add(path, "%s plus request.message_timeout (%s) exceeds the ext_proc filter's max_message_timeout limit (%s): at most %s",
				d.Duration, c.Request.MessageTimeout.Duration, MaxMessageTimeout, limit)
		}
	}
	wait("admission.max_wait", a.MaxWait)
	if a.MaxQueue < 1 {
		v.add("admission.max_queue", "must be at least 1")
	}
	if a.Poll.Duration <= 0 {
		v.add("admission.poll", "must be positive")
	}
	if a.RedisTimeout.Duration <= 0 {
		v.add("admission.redis_timeout", "must be positive")
	}
	if a.ClassHeader != "" {
		switch {
		case !headerNameRE.MatchString(a.ClassHeader):
			v.add("admission.class_header", "invalid header name %q", a.ClassHeader)
		case strings.HasPrefix(strings.ToLower(a.ClassHeader), "x-swarmgate-"):
			v.add("admission.class_header", "x-swarmgate-* headers are internal and stripped from clients")
		}
	}
	if a.SessionHeader != "" {
		switch {
		case !headerNameRE.MatchString(a.SessionHeader):
			v.add("admission.session_header", "invalid header name %q", a.SessionHeader)
		case strings.HasPrefix(strings.ToLower(a.SessionHeader), "x-swarmgate-"):
			v.add("admission.session_header", "x-swarmgate-* headers are internal and stripped from clients")
		}
	}
	if a.SessionIdle.Duration <= 0 {
		v.add("admission.session_idle", "must be positive")
	}
	if a.SessionSpan.Duration < 0 {
		v.add("admission.session_span", "must not be negative")
	}
	if a.MaxSessions < 0 {
		v.add("admission.max_sessions", "must not be negative")
	}
	classes := map[string]bool{}
	for i, cl := range a.Classes {
		p := fmt.Sprintf("admission.classes[%d]", i)
		switch {
		case !nameRE.MatchString(cl.Name):
			v.add(p+".name", "invalid class name %q", cl.Name)
		case classes[cl.Name]:
			v.add(p+".name", "duplicate class %q", cl.Name)
		}
		classes[cl.Name] = true
		if cl.Priority < 0 || cl.Priority > 15 {
			v.add(p+".priority", "must be between 0 and 15")
		}
		wait(p+".max_wait", cl.MaxWait)
	}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if t.Weight < 1 || t.Weight > 1000 {
			v.add(p+".weight", "must be between 1 and 1000")
		}
		wait(p+".max_wait", t.MaxWait)
		for j, k := range t.Keys {
			kp := fmt.Sprintf("%s.keys[%d]", p, j)
			if k.Class != "" && !classes[k.Class] {
				v.add(kp+".class", "unknown admission class %q", k.Class)
			}
			for n, hc := range k.HeaderClasses {
				if !classes[hc] {
					v.add(fmt.Sprintf("%s.header_classes[%d]", kp, n), "unknown admission class %q", hc)
				}
			}
			if len(k.HeaderClasses) > 0 && a.ClassHeader == "" {
				v.add(kp+".header_classes", "needs admission.class_header")
			}
		}
	}
}

// AdmissionClass returns the named class (zero value when unknown or "").
func (c *Config) AdmissionClass(name string) (AdmissionClass, bool) {
	for _, cl := range c.Admission.Classes {
		if cl.Name == name {
			return cl, true
		}
	}
	return AdmissionClass{}, false
}

// LongestAdmissionWait is the longest wait any tenant or class may get
// (0 when queueing is off).
func (c *Config) LongestAdmissionWait() time.Duration {
	if c.Admission.MaxWait.Duration <= 0 {
		return 0
	}
	w := c.Admission.MaxWait.Duration
	for _, cl := range c.Admission.Classes {
		w = max(w, cl.MaxWait.Duration)
	}
	for _, t := range c.Tenants {
		w = max(w, t.MaxWait.Duration)
	}
	return w
}

// keySlotLongWait is how long an attempt's key pick may wait for a paced
// key's slot when it can extend Envoy's message timer: one slot of a key
// paced down to about 12 requests a minute.
const keySlotLongWait = 5 * time.Second

// KeySlotWait bounds how long an upstream attempt's key pick waits for a
// paced key's slot (admission.pace): short within Envoy's message_timeout
// (half of it, at most 1 s), long once the pick has extended the message
// timer (override_message_timeout, within the upstream filter's
// max_message_timeout): 5 s, at most half the per-try timeout when one is
// set, whose timer already runs while the upstream filter decides.
func (c *Config) KeySlotWait() (short, long time.Duration) {
	short = min(c.Request.MessageTimeout.Duration/2, time.Second)
	long = keySlotLongWait
	if pt := c.Retry.PerTryTimeout.Duration; pt > 0 {
		long = min(long, pt/2)
	}
	return short, max(short, long)
}
