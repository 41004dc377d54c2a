package envoysim

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynMetadata is one stream's dynamic metadata (StreamInfo filter_metadata).
// Every filter of the request reads and writes it: the router-level
// ext_proc, the rate-limit filter and, because the upstream filter manager's
// streamInfo() is the downstream stream info (upstream_request.cc
// UpstreamFilterManager::streamInfo, v1.38.0), each attempt's upstream
// ext_proc too. A request is handled by one goroutine, so no lock.
type dynMetadata struct {
	ns map[string]*structpb.Struct
}

// merge is StreamInfoImpl::setDynamicMetadata (stream_info_impl.h, v1.38.0):
// MergeFrom into the namespace's Struct, so a key replaces the same key (the
// whole value, nested structs included) and other keys stay.
func (d *dynMetadata) merge(ns string, s *structpb.Struct) {
	if d.ns == nil {
		d.ns = map[string]*structpb.Struct{}
	}
	cur := d.ns[ns]
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		d.ns[ns] = cur
	}
	if s != nil {
		proto.Merge(cur, s)
	}
}

// has reports whether every namespace → key of want is present.
func (d *dynMetadata) has(want map[string]string) bool {
	for ns, k := range want {
		if d == nil || d.ns[ns] == nil || d.ns[ns].GetFields()[k] == nil {
			return false
		}
	}
	return true
}

// forward is the metadata_context of an ext_proc request: the stream's
// namespaces listed in forwarding_namespaces.untyped, copied
// (ext_proc.cc Filter::addDynamicMetadata, v1.38.0).
func (d *dynMetadata) forward(nss []string) *corev3.Metadata {
	m := &corev3.Metadata{}
	if d == nil {
		return m
	}
	for _, ns := range nss {
		if m.FilterMetadata == nil && d.ns[ns] != nil {
			m.FilterMetadata = map[string]*structpb.Struct{}
		}
		if s := d.ns[ns]; s != nil {
			m.FilterMetadata[ns] = proto.Clone(s).(*structpb.Struct)
		}
	}
	return m
}

// snapshot copies the metadata for a Record or the rate-limit filter.
func (d *dynMetadata) snapshot() map[string]*structpb.Struct {
	if len(d.ns) == 0 {
		return nil
	}
	out := make(map[string]*structpb.Struct, len(d.ns))
	for k, v := range d.ns {
		out[k] = proto.Clone(v).(*structpb.Struct)
	}
	return out
}

// plain is the Record.DynamicMetadata form: namespace → key → Go value.
func (d *dynMetadata) plain() map[string]map[string]any {
	if len(d.ns) == 0 {
		return nil
	}
	out := make(map[string]map[string]any, len(d.ns))
	for ns, s := range d.ns {
		out[ns] = s.AsMap()
	}
	return out
}
