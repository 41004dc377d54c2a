package rlsim

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Request is what the rate-limit filter sees of one HTTP request: its
// headers (after ext_proc's mutations) and the stream's dynamic metadata,
// by namespace (what ext_proc returned in dynamic_metadata and Envoy kept
// for the namespaces in receiving_namespaces).
type Request struct {
	Headers         http.Header
	DynamicMetadata map[string]*structpb.Struct
}

// policy is one entry of the filter-level rate_limits.
type policy struct {
	actions      []action
	hits         *hitsAddend // nil: no per-descriptor hits_addend
	onStreamDone bool
	xrl          routev3.RateLimit_XRateLimitOption
}

// action appends one descriptor entry. ok false means "no descriptor for
// this policy"; an entry with an empty key is skipped (skip_if_absent).
type action func(r *Request) (e entry, ok bool)

type entry struct{ key, value string }

// maxHitsAddend is Envoy's bound on a hits_addend value.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-msg-config-route-v3-ratelimit-hitsaddend
const maxHitsAddend = 1_000_000_000

func newPolicy(rl *routev3.RateLimit) (policy, error) {
	// Envoy rejects these in filter-level rate_limits
	// (source/extensions/filters/common/ratelimit_config/ratelimit_config.cc).
	if rl.GetStage() != nil || rl.GetDisableKey() != "" {
		return policy{}, errors.New("'stage' and 'disable_key' are not supported in filter-level rate_limits")
	}
	if rl.GetLimit() != nil {
		return policy{}, errors.New("rlsim: the limit override is not modelled")
	}
	p := policy{onStreamDone: rl.GetApplyOnStreamDone(), xrl: rl.GetXRatelimitOption()}
	for i, a := range rl.GetActions() {
		act, err := newAction(a)
		if err != nil {
			return policy{}, fmt.Errorf("action %d: %w", i, err)
		}
		p.actions = append(p.actions, act)
	}
	if h := rl.GetHitsAddend(); h != nil {
		ha, err := newHitsAddend(h)
		if err != nil {
			return policy{}, fmt.Errorf("hits_addend: %w", err)
		}
		p.hits = &ha
	}
	return p, nil
}

// newAction models the descriptor actions the control plane generates.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/rate_limit_filter#composing-actions
func newAction(a *routev3.RateLimit_Action) (action, error) {
	switch s := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RequestHeaders_:
		// request_headers: the first value of the header; a missing header
		// means no descriptor unless skip_if_absent, which drops only the
		// entry.
		rh := s.RequestHeaders
		name, key, skip := rh.GetHeaderName(), rh.GetDescriptorKey(), rh.GetSkipIfAbsent()
		return func(r *Request) (entry, bool) {
			vs := r.Headers.Values(name)
			if len(vs) == 0 {
				return entry{}, skip
			}
			return entry{key, vs[0]}, true
		}, nil
	case *routev3.RateLimit_Action_GenericKey_:
		// generic_key: a literal value (formatter parsing is off by
		// default); the key defaults to "generic_key".
		gk := s.GenericKey
		key := gk.GetDescriptorKey()
		if key == "" {
			key = "generic_key"
		}
		if strings.Contains(gk.GetDescriptorValue(), "%") {
			return nil, errors.New("rlsim: generic_key with a format string is not modelled")
		}
		val := gk.GetDescriptorValue()
		return func(*Request) (entry, bool) { return entry{key, val}, true }, nil
	case *routev3.RateLimit_Action_Metadata:
		// metadata (source DYNAMIC): a string value at metadata_key, else
		// default_value, else skip_if_absent decides.
		md := s.Metadata
		if md.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC {
			return nil, errors.New("rlsim: route-entry metadata is not modelled")
		}
		ns := md.GetMetadataKey().GetKey()
		var path []string
		for _, seg := range md.GetMetadataKey().GetPath() {
			path = append(path, seg.GetKey())
		}
		key, def, skip := md.GetDescriptorKey(), md.GetDefaultValue(), md.GetSkipIfAbsent()
		return func(r *Request) (entry, bool) {
			if v := lookup(r.DynamicMetadata, ns, path); v != nil {
				if s, ok := v.GetKind().(*structpb.Value_StringValue); ok && s.StringValue != "" {
					return entry{key, s.StringValue}, true
				}
			}
			if def != "" {
				return entry{key, def}, true
			}
			return entry{}, skip
		}, nil
	default:
		return nil, fmt.Errorf("rlsim: action %T is not modelled", s)
	}
}

// hitsAddend is a fixed number or one substitution, %REQ(h)% or
// %DYNAMIC_METADATA(ns:key...)%.
type hitsAddend struct {
	number  *uint64
	eval    func(r *Request) *structpb.Value
	display string
}

var substitution = regexp.MustCompile(`^%([A-Z_]+)\(([^()]*)\)(?::([0-9]+))?%$`)

func newHitsAddend(h *routev3.RateLimit_HitsAddend) (hitsAddend, error) {
	if h.GetIsNegativeHits() {
		return hitsAddend{}, errors.New("rlsim: is_negative_hits is not modelled")
	}
	switch {
	case h.GetFormat() != "" && h.GetNumber() != nil, h.GetFormat() == "" && h.GetNumber() == nil:
		return hitsAddend{}, errors.New("hits_addend must contain either a format or a number")
	case h.GetNumber() != nil:
		n := h.GetNumber().GetValue()
		if n > maxHitsAddend {
			return hitsAddend{}, fmt.Errorf("hits_addend number %d above %d", n, maxHitsAddend)
		}
		return hitsAddend{number: &n}, nil
	}
	m := substitution.FindStringSubmatch(h.GetFormat())
	if m == nil {
		return hitsAddend{}, fmt.Errorf("hits_addend format %q must contain exactly one substitution", h.GetFormat())
	}
	maxLen := -1
	if m[3] != "" {
		maxLen, _ = strconv.Atoi(m[3])
	}
	ha := hitsAddend{display: h.GetFormat()}
	switch m[1] {
	case "REQ":
		// %REQ(X?Y):Z%: header X, else Y; missing is a null value.
		names := strings.SplitN(m[2], "?", 2)
		ha.eval = func(r *Request) *structpb.Value {
			for _, n := range names {
				if vs := r.Headers.Values(n); len(vs) > 0 {
					v := vs[0]
					if maxLen >= 0 && len(v) > maxLen {
						v = v[:maxLen]
					}
					return structpb.NewStringValue(v)
				}
			}
			return nil
		}
	case "DYNAMIC_METADATA":
		parts := strings.Split(m[2], ":")
		if len(parts) < 2 {
			return hitsAddend{}, fmt.Errorf("%%DYNAMIC_METADATA(%s)%%: want NAMESPACE:KEY", m[2])
		}
		ha.eval = func(r *Request) *structpb.Value { return lookup(r.DynamicMetadata, parts[0], parts[1:]) }
	default:
		return hitsAddend{}, fmt.Errorf("rlsim: hits_addend command %%%s%% is not modelled", m[1])
	}
	return ha, nil
}

// value returns the hits to send, or ok false when Envoy would drop the
// descriptor: only a number or a numeric string in [0, 1e9] is valid,
// truncated to an integer.
func (h *hitsAddend) value(r *Request) (uint64, bool) {
	if h.number != nil {
		return *h.number, true
	}
	v := h.eval(r)
	var x float64
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		x = k.NumberValue
	case *structpb.Value_StringValue:
		f, err := strconv.ParseFloat(strings.TrimSpace(k.StringValue), 64)
		if err != nil {
			return 0, false
		}
		x = f
	default: // null (missing), bool, struct, list
		return 0, false
	}
	if math.IsNaN(x) || x < 0 || x > maxHitsAddend {
		return 0, false
	}
	return uint64(x), true
}

func lookup(md map[string]*structpb.Struct, ns string, path []string) *structpb.Value {
	s := md[ns]
	if s == nil || len(path) == 0 {
		return nil
	}
	v := s.GetFields()[path[0]]
	for _, p := range path[1:] {
		st := v.GetStructValue()
		if st == nil {
			return nil
		}
		v = st.GetFields()[p]
	}
	return v
}

// descriptor builds the policy's descriptor, or ok false when any action
// fails or the hits_addend is invalid.
func (p *policy) descriptor(r *Request) (*rlcommon.RateLimitDescriptor, bool) {
	d := &rlcommon.RateLimitDescriptor{}
	for _, a := range p.actions {
		e, ok := a(r)
		if !ok {
			return nil, false
		}
		if e.key != "" {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.key, Value: e.value})
		}
	}
	if p.hits != nil {
		n, ok := p.hits.value(r)
		if !ok {
			return nil, false
		}
		d.HitsAddend = wrapperspb.UInt64(n)
	}
	return d, true
}
