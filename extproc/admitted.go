package extproc

import (
	"bytes"
	"encoding/base64"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/identity"
)

// admitted is what the router-level filter admitted a request with and the
// upstream filter of every attempt needs. It travels as dynamic metadata
// (contract.MetadataNamespace), signed: Envoy's upstream filters share the
// router's request header map (source/common/router/upstream_request.cc,
// UpstreamRequest::acceptHeadersFromRouter, Envoy 1.38), so internal
// headers that one attempt removes before the request leaves Envoy would be
// gone for the next attempt and for the rate-limit filter at stream end.
type admitted struct {
	requestID   string
	tenant      string
	virtualKey  string
	model       string
	estTokens   int
	maxTokens   int
	sticky      string
	path        string
	backends    string // comma-separated
	bodyBytes   int
	issued      int64
	reservation string
	// anthropicVersion/-Beta: the client's headers, set by each attempt on
	// Anthropic-style backends and removed for others (the header map is
	// shared by all attempts).
	anthropicVersion, anthropicBeta string
	// key, when set, is the only upstream key an attempt may use: the one
	// that created the request's previous_response_id (affinity.go).
	key string
}

// maxIdentityAge bounds how old a signed identity an attempt accepts: longer
// than any route timeout the config allows, short enough that a leaked one
// is soon worthless.
const maxIdentityAge = 2 * time.Hour

// appendSigned appends the message the signature covers, every field in
// a fixed order.
func (a *admitted) appendSigned(msg []byte) []byte {
	for _, f := range [...]string{a.requestID, a.tenant, a.virtualKey, a.model, a.sticky, a.path, a.backends, a.anthropicVersion, a.anthropicBeta, a.key} {
		msg = identity.AppendField(msg, f)
	}
	for _, n := range [...]int64{int64(a.estTokens), int64(a.maxTokens), int64(a.bodyBytes), a.issued} {
		msg = identity.AppendInt(msg, n)
	}
	return msg
}

// requestMeta is the request-body answer's metadata (envoymsg.RequestMeta)
// with the buffers the admission token is built in, reused per pooled
// router stream.
type requestMeta struct {
	envoymsg.RequestMeta
	scratch, tok []byte
}

// tokenEncoding encodes the signed message in the token (a metadata string
// must be UTF-8; the message is length-prefixed binary).
var tokenEncoding = base64.RawURLEncoding

// fill signs a and returns the metadata; quota is the caller's sub-key
// limits (zero for a config key) and parent, parentQuota the minting
// sub-key's, plain fields for the rate-limit filter that no attempt needs,
// so they stay out of the signed token.
func (m *requestMeta) fill(sg *keyRing, a admitted, quota config.Limits, parent string, parentQuota config.Limits) *structpb.Struct {
	m.scratch = a.appendSigned(m.scratch[:0])
	m.tok = tokenEncoding.AppendEncode(m.tok[:0], m.scratch)
	m.tok = append(m.tok, '.')
	m.tok = sg.cur.signer.Sign(m.tok, m.scratch)
	return m.Fill(envoymsg.RequestFields{RequestID: a.requestID, Tenant: a.tenant, VirtualKey: a.virtualKey, Model: a.model,
		Reservation: a.reservation, EstTokens: a.estTokens, MaxTokens: a.maxTokens, Token: m.tok,
		SubkeyRPM: quota.RPM, SubkeyRPD: quota.RPD, SubkeyTPM: quota.TPM,
		ParentKey: parent, ParentRPM: parentQuota.RPM, ParentRPD: parentQuota.RPD, ParentTPM: parentQuota.TPM})
}

// readAdmitted reads and verifies the admission token Envoy forwarded to an
// upstream attempt (metadata_context, metadata_options.forwarding_namespaces).
// buf is scratch space (returned grown, for reuse). ok is false when the
// token is missing, altered, signed with a key the ring does not hold or too
// old: the attempt did not come through admission.
func readAdmitted(md *structpb.Struct, sg *keyRing, now time.Time, buf []byte) (a admitted, _ []byte, ok bool) {
	tok := md.GetFields()[contract.MetaAdmission].GetStringValue()
	dot := strings.LastIndexByte(tok, '.')
	if dot < 0 {
		return a, buf, false
	}
	msg, err := tokenEncoding.AppendDecode(buf[:0], []byte(tok[:dot]))
	if err != nil || !sg.verify(tok[dot+1:], msg, now) {
		return a, msg, false
	}
	// The fields in appendSigned's order; only what an attempt uses is
	// kept as a string.
	var f [10][]byte
	rest := msg
	for i := range f {
		if f[i], rest, ok = identity.ReadField(rest); !ok {
			return a, msg, false
		}
	}
	var n [4]int64
	for i := range n {
		if n[i], rest, ok = identity.ReadInt(rest); !ok {
			return a, msg, false
		}
	}
	a = admitted{requestID: string(f[0]), model: string(f[3]), sticky: string(f[4]), path: string(f[5]), backends: string(f[6]),
		anthropicVersion: string(f[7]), anthropicBeta: string(f[8]), key: string(f[9]),
		estTokens: int(n[0]), maxTokens: int(n[1]), bodyBytes: int(n[2]), issued: n[3]}
	age := now.Sub(time.Unix(a.issued, 0))
	return a, msg, len(rest) == 0 && a.requestID != "" && a.path != "" && age > -time.Minute && age < maxIdentityAge
}

// signerFor is the key ring of a config snapshot; it is built once per
// snapshot and cached lock-free.
type signerFor struct {
	cfg  *config.Config
	ring *keyRing
}

// keyRing signs admissions with the identity key of the config in force and
// verifies them with it or with a key it replaced less than the grace
// period ago. A reload that changes the key (identity.signing_key, or the
// provider keys it is derived from: adding or removing a relay) would
// otherwise refuse every attempt of a request admitted just before it: the
// router-level stream signed with the old config, the attempt verifies with
// the new one.
type keyRing struct {
	cur  ringKey
	prev []ringKey // replaced keys still accepted, newest first
}

type ringKey struct {
	key    []byte
	signer *identity.Signer
	until  time.Time // accepted until (replaced keys only)
}

// maxPrevKeys bounds the replaced keys a ring keeps (reloads in quick
// succession).
const maxPrevKeys = 4

func (k *keyRing) verify(sig string, msg []byte, now time.Time) bool {
	if k.cur.signer.Verify(sig, msg) {
		return true
	}
	for _, p := range k.prev {
		if now.Before(p.until) && p.signer.Verify(sig, msg) {
			return true
		}
	}
	return false
}

// identityGrace is how long a replaced key stays accepted: as long as a
// request admitted before the change may still start attempts (its route
// timeout), never beyond a token's own age limit.
func identityGrace(c *config.Config) time.Duration {
	d := max(c.Request.Timeout.D(), c.Request.LongTimeout.D())
	for _, m := range c.Models {
		d = max(d, m.Timeout.D())
	}
	return min(d, maxIdentityAge)
}

func (s *Server) signer(c *config.Config) *keyRing {
	last := s.signerCache.Load()
	if last != nil && last.cfg == c {
		return last.ring
	}
	var prev *keyRing
	if last != nil {
		prev = last.ring
	}
	ring := nextRing(prev, c.IdentityKey(), identityGrace(c), s.opts.Now())
	s.signerCache.Store(&signerFor{cfg: c, ring: ring})
	return ring
}

// nextRing is the ring for a snapshot whose identity key is key, following
// prev (nil for the first). The same key keeps the ring; a new one demotes
// the current key to accepted-until now+grace. Snapshots from both sides of
// a change alternate while requests admitted before it finish (each stream
// keeps the config it started with), so a key coming back is taken from
// the replaced ones, not derived again.
func nextRing(prev *keyRing, key []byte, grace time.Duration, now time.Time) *keyRing {
	if prev == nil {
		return &keyRing{cur: ringKey{key: key, signer: identity.NewSigner(key)}}
	}
	if bytes.Equal(prev.cur.key, key) {
		return prev
	}
	r := &keyRing{}
	replaced := ringKey{key: prev.cur.key, signer: prev.cur.signer, until: now.Add(grace)}
	for _, k := range append([]ringKey{replaced}, prev.prev...) {
		switch {
		case bytes.Equal(k.key, key):
			r.cur = ringKey{key: key, signer: k.signer}
		case now.Before(k.until) && len(r.prev) < maxPrevKeys:
			r.prev = append(r.prev, k)
		}
	}
	if r.cur.signer == nil {
		r.cur = ringKey{key: key, signer: identity.NewSigner(key)}
	}
	return r
}

// otherBackends appends to dst the backends of the request other than the
// attempt's.
func (a *admitted) otherBackends(dst []string, self string) []string {
	for b := range strings.SplitSeq(a.backends, ",") {
		if b != "" && b != self {
			dst = append(dst, b)
		}
	}
	return dst
}

// label keeps a client-supplied header value only as a printable label:
// at most 256 bytes of visible ASCII and spaces (no CR, LF or other control
// bytes that could smuggle a header), else it is dropped.
func label(v string) string {
	if len(v) > 256 {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return v
}

// keyLimits are the limits a virtual key carries itself: a sub-key's
// (the rate-limit filter enforces them per key), none for a config key.
func keyLimits(k *config.VirtualKey) config.Limits {
	if k == nil {
		return config.Limits{}
	}
	return k.Limits
}

// hasOwnLimits reports a sub-key with limits of its own.
func hasOwnLimits(k *config.VirtualKey) bool { return keyLimits(k) != config.Limits{} }

// parentLimits are the id and limits of the sub-key that minted o's key
// ("" when none, or it has no limits): they bound o's requests too.
func parentLimits(o config.KeyOwner) (string, config.Limits) {
	if !hasOwnLimits(o.Parent) {
		return "", config.Limits{}
	}
	return o.Parent.ID, o.Parent.Limits
}
