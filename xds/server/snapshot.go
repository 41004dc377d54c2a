package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
)

// snapshot is a cachev3.ResourceSnapshot over any type URL, so the one cache
// serves Envoy's types, the rate-limit service's RateLimitConfig and our
// swarmgate.v1.GatewayConfig (go-control-plane's own Snapshot only knows its
// fixed list of types).
//
// Versions are content hashes: each resource's is the SHA-256 of its
// deterministic encoding, a type's is the hash of its sorted (name, version)
// pairs. The same config therefore gives the same versions on every
// control-plane replica, and a type whose resources did not change keeps its
// version, so clients see no push for it (EDS-only updates).
type snapshot struct {
	types map[string]*typeResources
}

type typeResources struct {
	version  string
	items    map[string]types.ResourceWithTTL
	versions map[string]string // resource name -> content hash
}

var _ cachev3.ResourceSnapshot = (*snapshot)(nil)

// resourceNamer is what go-control-plane uses to name non-EDS resources.
type resourceNamer interface{ GetName() string }

// newTypeResources hashes and indexes one type's resources.
func newTypeResources(rs []types.Resource) (*typeResources, error) {
	t := &typeResources{
		items:    make(map[string]types.ResourceWithTTL, len(rs)),
		versions: make(map[string]string, len(rs)),
	}
	opts := proto.MarshalOptions{Deterministic: true}
	for _, r := range rs {
		name := cachev3.GetResourceName(r)
		if name == "" {
			return nil, fmt.Errorf("resource %T has no name", r)
		}
		if _, dup := t.items[name]; dup {
			return nil, fmt.Errorf("duplicate resource name %q", name)
		}
		b, err := opts.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		t.items[name] = types.ResourceWithTTL{Resource: r}
		t.versions[name] = hex.EncodeToString(sum[:12])
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(t.versions)) {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(t.versions[name]))
		h.Write([]byte{0})
	}
	t.version = hex.EncodeToString(h.Sum(nil)[:8])
	return t, nil
}

// newSnapshot builds a snapshot from resources by type URL.
func newSnapshot(byType map[string][]types.Resource) (*snapshot, error) {
	s := &snapshot{types: make(map[string]*typeResources, len(byType))}
	var errs []error
	for typeURL, rs := range byType {
		t, err := newTypeResources(rs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", typeURL, err))
			continue
		}
		s.types[typeURL] = t
	}
	return s, errors.Join(errs...)
}

// with returns a copy of s with one type replaced (the others are shared:
// snapshots are never modified after they are built).
func (s *snapshot) with(typeURL string, t *typeResources) *snapshot {
	out := &snapshot{types: maps.Clone(s.types)}
	out.types[typeURL] = t
	return out
}

func (s *snapshot) GetVersion(typeURL string) string {
	if t := s.types[typeURL]; t != nil {
		return t.version
	}
	return ""
}

func (s *snapshot) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	if t := s.types[typeURL]; t != nil {
		return t.items
	}
	return nil
}

func (s *snapshot) GetResources(typeURL string) map[string]types.Resource {
	t := s.types[typeURL]
	if t == nil {
		return nil
	}
	out := make(map[string]types.Resource, len(t.items))
	for k, v := range t.items {
		out[k] = v.Resource
	}
	return out
}

// ConstructVersionMap: the per-resource versions are computed when the
// snapshot is built.
func (s *snapshot) ConstructVersionMap() error { return nil }

func (s *snapshot) GetVersionMap(typeURL string) map[string]string {
	if t := s.types[typeURL]; t != nil {
		return t.versions
	}
	return nil
}
