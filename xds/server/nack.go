package server

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// A SotW NACK carries the last version the client accepted, not the one it
// rejected; the snapshot cache compares that with its own, finds them
// different and sends the rejected resources straight back. A replica that
// cannot resolve a new key's secret (docs/xds.md) was sent the same CDS
// 15,760 times a second. So a NACK of the response last sent on a stream
// is made to name that response's version: the cache then waits for the
// next config instead of resending this one. The delta protocol tracks
// versions per resource and does not loop.

// sentVersions is, per SotW stream and type, the nonce and version of the
// response last sent.
type sentVersions struct {
	mu   sync.Mutex
	last map[int64]map[string]sentResponse
}

type sentResponse struct{ nonce, version string }

func (s *sentVersions) record(stream int64, r *discoveryv3.DiscoveryResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[int64]map[string]sentResponse{}
	}
	m := s.last[stream]
	if m == nil {
		m = map[string]sentResponse{}
		s.last[stream] = m
	}
	m[r.GetTypeUrl()] = sentResponse{nonce: r.GetNonce(), version: r.GetVersionInfo()}
}

// holdRejected makes a NACK of the last response sent on the stream name
// that response's version, so the cache does not send it again.
func (s *sentVersions) holdRejected(stream int64, r *discoveryv3.DiscoveryRequest) {
	if r.GetErrorDetail() == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.last[stream][r.GetTypeUrl()]; ok && last.nonce == r.GetResponseNonce() {
		r.VersionInfo = last.version
	}
}

func (s *sentVersions) forget(stream int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, stream)
}
