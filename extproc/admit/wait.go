package admit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Wait is the keys step: nil when a key of the request's backends is
// usable, else the refusal. Without a queue (or admission.max_wait 0) it
// refuses at once when no key is usable; with one, a request whose keys
// only lack capacity that comes back soon waits for it in the queue, and
// the message's timer is extended for that wait.
//
// A request pinned to the key that holds its previous response needs that
// key, the only one it may use: while the key is out it first waits for it
// in a queue scope of its own (a scope of the backends would hold every
// request behind it), then goes the backends' paced way like any other.
func (a *Admitter) Wait(ctx context.Context, cfg *config.Config, f *Facts, t Timer) *Refusal {
	ok, retry := a.keysReady(f)
	pacer, _ := a.Keys.(Pacer)
	pacing := cfg.Admission.Pace && pacer != nil
	if a.Queue == nil || cfg.Admission.MaxWait.Duration <= 0 || (ok && !pacing) {
		if !ok {
			return a.exhausted(f, retry, a.keysFailing(f))
		}
		return nil
	}
	if !ok && a.keysFailing(f) {
		// A failing backend is not capacity that comes back: 503 now.
		return a.exhausted(f, retry, true)
	}
	req := queueRequest(cfg, f, t)
	req.OnWait = func() {
		// Envoy honours one override per message, from 1 ms up to the
		// filter's max_message_timeout, restarting the timer from when it
		// arrives (ext_proc.cc Filter::onNewTimeout, processor_state.cc
		// restartMessageTimer, v1.38.0): one override covering the whole
		// wait plus the answer's own message_timeout (a pinned request's
		// second wait, for its backends, is within it; Timer keeps the
		// first).
		if t != nil {
			t.Extend(req.MaxWait + cfg.Request.MessageTimeout.Duration)
		}
	}
	req.Tokens = f.Need()
	if _, pinned := a.pinnedKeys(f); pinned && !ok {
		start := time.Now()
		req.Scope = "pin:" + f.Pinned.Backend + "/" + f.Pinned.KeyID
		res := a.Queue.Admit(ctx, req, func() (bool, time.Duration, Rate) {
			ok, ra := a.keysReady(f)
			return ok, ra, Rate{}
		})
		if !res.Admitted {
			return a.waitedOut(f, res)
		}
		if req.MaxWait -= time.Since(start); !pacing || req.MaxWait <= 0 {
			return nil
		}
	}
	req.Scope = strings.Join(f.Backends, ",")
	res := a.Queue.Admit(ctx, req, func() (bool, time.Duration, Rate) {
		ok, ra := a.Keys.Available(f.Backends)
		var rate Rate
		if pacing {
			rate = pacer.Pace(f.Backends)
		}
		return ok, ra, rate
	})
	if res.Admitted {
		return nil
	}
	return a.waitedOut(f, res)
}

// keysReady reports whether the request's keys can take it now (any key
// of its backends, or the one it is pinned to), and if not how soon.
func (a *Admitter) keysReady(f *Facts) (bool, time.Duration) {
	if pk, ok := a.pinnedKeys(f); ok {
		ready, retry, _ := pk.KeyAvailable(f.Pinned.Backend, f.Pinned.KeyID)
		return ready, retry
	}
	return a.Keys.Available(f.Backends)
}

// keysFailing reports whether the request's keys are open because they
// failed, which waiting does not mend.
func (a *Admitter) keysFailing(f *Facts) bool {
	if pk, ok := a.pinnedKeys(f); ok {
		_, _, failing := pk.KeyAvailable(f.Pinned.Backend, f.Pinned.KeyID)
		return failing
	}
	return a.Keys.Failing(f.Backends)
}

// pinnedKeys is the key pool's one-key check when the request is pinned
// to a key and the pool offers it.
func (a *Admitter) pinnedKeys(f *Facts) (PinnedKeys, bool) {
	if f.Pinned.KeyID == "" {
		return nil, false
	}
	pk, ok := a.Keys.(PinnedKeys)
	return pk, ok
}

// exhausted is the refusal when the request's keys cannot take it.
func (a *Admitter) exhausted(f *Facts, retry time.Duration, failing bool) *Refusal {
	if _, ok := a.pinnedKeys(f); ok {
		return PinnedKeyUnavailable(f.Alias, retry)
	}
	return KeysExhausted(f.Alias, retry, failing)
}

// waitedOut is the refusal of a request the queue did not admit.
func (a *Admitter) waitedOut(f *Facts, res QueueResult) *Refusal {
	retry := res.RetryAfter
	if res.Reason == "timeout" {
		// A wait that ended: the later of the queue's figure (its place in
		// a paced order, which the keys know nothing of) and the keys'
		// reopening as they see it now. A refusal at once (queue_full,
		// sessions_full, too_long) keeps its own: replacing it with the
		// keys' told a client refused for its session bound to come back
		// in a second.
		if ok, ra := a.keysReady(f); !ok {
			retry = max(retry, ra)
		}
	}
	if _, ok := a.pinnedKeys(f); ok {
		r := PinnedKeyUnavailable(f.Alias, retry)
		if res.Waited > 0 {
			r.Message = "The upstream key holding previous_response_id for `" + f.Alias + "` stayed rate limited or busy for the " +
				res.Waited.Round(time.Millisecond).String() + " this request waited (" + res.Reason + "); retry after the indicated time."
		}
		return r
	}
	r := KeysExhausted(f.Alias, retry, false)
	if res.Waited > 0 {
		r.Message = "Every upstream key for `" + f.Alias + "` stayed rate limited or busy for the " + res.Waited.Round(time.Millisecond).String() +
			" this request waited (" + res.Reason + "); retry after the indicated time."
	}
	r.Status = http.StatusTooManyRequests
	return r
}

// queueRequest reads the request's class: the virtual key's, or the one the
// operator's class header names when the key lists it in header_classes.
// Nothing else a client sends chooses a class.
func queueRequest(cfg *config.Config, f *Facts, t Timer) QueueRequest {
	tn := f.Owner.Tenant
	req := QueueRequest{Tenant: tn.Name, Weight: float64(max(tn.Weight, 1))}
	var cl config.AdmissionClass
	var classed bool
	req.MaxWait, cl, classed = maxWait(cfg, f, t)
	if classed {
		req.Class, req.Priority = cl.Name, cl.Priority
	}
	req.Session = session(f, t)
	return req
}

// maxWait is how long the request may wait in the queue: its class's
// bound, else its tenant's, else admission.max_wait; cl is its class, when
// classed.
func maxWait(cfg *config.Config, f *Facts, t Timer) (d time.Duration, cl config.AdmissionClass, classed bool) {
	d = cfg.Admission.MaxWait.Duration
	if tn := f.Owner.Tenant; tn.MaxWait.Duration > 0 {
		d = tn.MaxWait.Duration
	}
	class := f.Owner.Key.Class
	if t != nil {
		if h := t.ClassHeader(); h != "" {
			for _, hc := range f.Owner.Key.HeaderClasses {
				if hc == h {
					class = hc
					break
				}
			}
		}
	}
	if cl, classed = cfg.AdmissionClass(class); classed && cl.MaxWait.Duration > 0 {
		d = cl.MaxWait.Duration
	}
	return d, cl, classed
}

// session names the request's chain of calls for the queue: the sticky
// header's value (x-session-id), else admission.session_header's, else the
// virtual key. A client-sent name is scoped by tenant (and bounded), so no
// tenant can join, or count as, another tenant's session.
func session(f *Facts, t Timer) string {
	tn := f.Owner.Tenant.Name
	v := f.Sticky
	if v == "" && t != nil {
		v = t.SessionHeader()
	}
	if v == "" {
		return tn + "/key/" + f.Owner.Key.ID
	}
	if len(v) > 128 {
		sum := sha256.Sum256([]byte(v))
		v = "h:" + hex.EncodeToString(sum[:16])
	}
	return tn + "/session/" + v
}
