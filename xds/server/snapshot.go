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
	plain    map[string]types.Resource // items without TTL (the Delta cache asks per watch)
	versions map[string]string         // resource name -> content hash
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
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		name := cachev3.GetResourceName(r)
		if seen[name] {
			return nil, fmt.Errorf("duplicate resource name %q", name)
		}
		seen[name] = true
		if err := t.put(name, r); err != nil {
			return nil, err
		}
	}
	t.seal()
	return t, nil
}

// replacing returns a copy of t with the given resources replaced or
// added; only those are re-encoded (an EDS update for one backend touches
// only the pools that use it).
func (t *typeResources) replacing(rs []types.Resource) (*typeResources, error) {
	out := &typeResources{items: maps.Clone(t.items), versions: maps.Clone(t.versions)}
	for _, r := range rs {
		if err := out.put(cachev3.GetResourceName(r), r); err != nil {
			return nil, err
		}
	}
	out.seal()
	return out, nil
}

func (t *typeResources) put(name string, r types.Resource) error {
	if name == "" {
		return fmt.Errorf("resource %T has no name", r)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	sum := sha256.Sum256(b)
	t.items[name] = types.ResourceWithTTL{Resource: r}
	t.versions[name] = hex.EncodeToString(sum[:12])
	return nil
}

// seal computes the type version from the resource versions.
func (t *typeResources) seal() {
	t.plain = make(map[string]types.Resource, len(t.items))
	for k, v := range t.items {
		t.plain[k] = v.Resource
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(t.versions)) {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(t.versions[name]))
		h.Write([]byte{0})
	}
	t.version = hex.EncodeToString(h.Sum(nil)[:8])
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

// GetResources is shared, not copied: the cache only reads it.
func (s *snapshot) GetResources(typeURL string) map[string]types.Resource {
	if t := s.types[typeURL]; t != nil {
		return t.plain
	}
	return nil
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
