// Package identity mints the gateway's own request identities and signs the
// facts the router-level ext_proc admitted a request with, so that the
// per-attempt upstream filter (which may run on another replica) can trust
// them without trusting whoever opened its gRPC stream.
//
// A client's x-request-id is only a correlation label: Envoy keeps it for
// internal callers and behind front proxies, so keying billing, limits or
// breakers on it lets one id be served many times and billed once.
package identity

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
)

// idBytes is the entropy of a request id: 96 bits keep a collision among
// billions of requests out of reach.
const idBytes = 12

// NewRequestID returns "sg-" followed by 24 random hex digits.
func NewRequestID() string {
	var b [idBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	var out [3 + 2*idBytes]byte
	copy(out[:], "sg-")
	hex.Encode(out[3:], b[:])
	return string(out[:])
}

// SigLen is the length of a signature in hex digits (128 bits of HMAC).
const SigLen = 32

// AppendField appends one field of a message to sign, length prefixed, so
// ("ab","c") and ("a","bc") sign differently.
func AppendField(msg []byte, f string) []byte {
	msg = binary.AppendUvarint(msg, uint64(len(f)))
	return append(msg, f...)
}

// AppendInt appends a number as a field.
func AppendInt(msg []byte, n int64) []byte {
	var b [20]byte
	d := strconv.AppendInt(b[:0], n, 10)
	msg = binary.AppendUvarint(msg, uint64(len(d)))
	return append(msg, d...)
}

// ReadField reads the field AppendField wrote at the start of msg and
// returns it with the rest of msg; ok is false when msg is malformed.
func ReadField(msg []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(msg)
	if w <= 0 || n > uint64(len(msg)-w) {
		return nil, nil, false
	}
	return msg[w : w+int(n)], msg[w+int(n):], true
}

// ReadInt reads a field AppendInt wrote.
func ReadInt(msg []byte) (n int64, rest []byte, ok bool) {
	f, rest, ok := ReadField(msg)
	if !ok || len(f) == 0 || len(f) > 19 {
		return 0, nil, false
	}
	n, err := strconv.ParseInt(string(f), 10, 64)
	return n, rest, err == nil
}

// Signer signs and verifies messages built with AppendField with
// HMAC-SHA256. It is safe for concurrent use.
type Signer struct {
	pool sync.Pool // of hash.Hash
}

// NewSigner builds a signer from key material (any length; it is hashed).
func NewSigner(key []byte) *Signer {
	k := sha256.Sum256(append([]byte("swarmgate request identity v1\x00"), key...))
	s := &Signer{}
	s.pool.New = func() any { return hmac.New(sha256.New, k[:]) }
	return s
}

// Sign appends the hex signature of msg to dst.
func (s *Signer) Sign(dst, msg []byte) []byte {
	var sum [sha256.Size]byte
	s.mac(sum[:0], msg)
	return hex.AppendEncode(dst, sum[:SigLen/2])
}

// Verify reports whether sig is the signature of msg (constant time).
func (s *Signer) Verify(sig string, msg []byte) bool {
	if len(sig) != SigLen {
		return false
	}
	var got [SigLen / 2]byte
	if _, err := hex.Decode(got[:], []byte(sig)); err != nil {
		return false
	}
	var sum [sha256.Size]byte
	s.mac(sum[:0], msg)
	return hmac.Equal(got[:], sum[:SigLen/2])
}

func (s *Signer) mac(dst, msg []byte) []byte {
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	out := h.Sum(dst)
	s.pool.Put(h)
	return out
}
