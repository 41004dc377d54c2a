package extproc

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// signedBy is the admission namespace a router-level stream signing with
// ring writes for a request admitted at now.
func signedBy(ring *keyRing, now time.Time) *structpb.Struct {
	var m requestMeta
	return m.fill(ring, admitted{requestID: "sg-1", tenant: "team", model: "gpt", path: "/v1/chat/completions", issued: now.Unix()}, config.Limits{}, "", config.Limits{})
}

// TestKeyRingAcrossReloads: an admission signed before a reload that
// changed the identity key (a relay and its keys added or removed) still
// verifies on an attempt that runs after it, for the grace period only;
// a key the ring never held never verifies.
func TestKeyRingAcrossReloads(t *testing.T) {
	const grace = 10 * time.Minute
	t0 := time.Unix(1_800_000_000, 0)
	k1, k2, k3 := []byte("key one"), []byte("key two"), []byte("key three")
	r1 := nextRing(nil, k1, grace, t0)
	r2 := nextRing(r1, k2, grace, t0)
	r3 := nextRing(r2, k3, grace, t0.Add(time.Minute))
	stranger := nextRing(nil, []byte("another gateway"), grace, t0)

	tests := []struct {
		name   string
		signer *keyRing
		ring   *keyRing
		at     time.Duration
		want   bool
	}{
		{"same key", r1, r1, time.Second, true},
		{"signed before the reload, attempt after", r1, r2, time.Second, true},
		{"signed before the reload, attempt at the end of the grace", r1, r2, grace - time.Second, true},
		{"signed before the reload, attempt after the grace", r1, r2, grace + time.Second, false},
		{"signed after the reload, attempt on a stream still on the old config", r2, nextRing(r2, k1, grace, t0), time.Second, true},
		{"two reloads in a row", r1, r3, 2 * time.Minute, true},
		{"another key", stranger, r2, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := signedBy(tt.signer, t0)
			md := m.Fields[contract.AdmissionNamespace].GetStructValue()
			a, _, ok := readAdmitted(md, tt.ring, t0.Add(tt.at), nil)
			if ok != tt.want {
				t.Fatalf("verified %v, want %v", ok, tt.want)
			}
			if ok && (a.requestID != "sg-1" || a.model != "gpt") {
				t.Errorf("read %+v", a)
			}
		})
	}
}

// TestKeyRingKeepsAndBounds: a snapshot with the same key keeps the ring
// (no new signer per reload); a key coming back reuses its signer; at most
// maxPrevKeys replaced keys are kept, expired ones are dropped.
func TestKeyRingKeepsAndBounds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r1 := nextRing(nil, []byte("k1"), time.Minute, t0)
	if nextRing(r1, []byte("k1"), time.Minute, t0) != r1 {
		t.Error("the same key built a new ring")
	}
	r2 := nextRing(r1, []byte("k2"), time.Minute, t0)
	if back := nextRing(r2, []byte("k1"), time.Minute, t0); back.cur.signer != r1.cur.signer || len(back.prev) != 1 {
		t.Errorf("k1 coming back: %+v", back)
	}
	r := r1
	for i := range 10 {
		r = nextRing(r, []byte{byte('a' + i)}, time.Minute, t0)
	}
	if len(r.prev) != maxPrevKeys {
		t.Errorf("%d replaced keys kept, want %d", len(r.prev), maxPrevKeys)
	}
	if r = nextRing(r, []byte("late"), time.Minute, t0.Add(2*time.Minute)); len(r.prev) != 1 {
		t.Errorf("after the grace the ring keeps %d replaced keys, want only the one just replaced", len(r.prev))
	}
}
