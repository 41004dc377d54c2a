package envoysim

import (
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

type header struct{ key, value string }

// headers is an ordered multi-map with lower-case keys, like Envoy's
// HeaderMap. Pseudo-headers (:method, :path, :authority, :scheme, :status)
// are ordinary entries.
type headers []header

func (h headers) get(k string) string {
	for _, e := range h {
		if e.key == k {
			return e.value
		}
	}
	return ""
}

func (h headers) has(k string) bool {
	for _, e := range h {
		if e.key == k {
			return true
		}
	}
	return false
}

func (h *headers) del(k string) {
	out := (*h)[:0]
	for _, e := range *h {
		if e.key != k {
			out = append(out, e)
		}
	}
	*h = out
}

func (h *headers) set(k, v string) {
	for i, e := range *h {
		if e.key == k {
			(*h)[i].value = v
			h.delAfter(k, i)
			return
		}
	}
	*h = append(*h, header{k, v})
}

func (h *headers) delAfter(k string, i int) {
	out := (*h)[:i+1]
	for _, e := range (*h)[i+1:] {
		if e.key != k {
			out = append(out, e)
		}
	}
	*h = out
}

func (h *headers) add(k, v string) { *h = append(*h, header{k, v}) }

func (h headers) clone() headers { return append(headers(nil), h...) }

// proto renders the map as Envoy sends it: values in raw_value, never value
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/service/ext_proc/v3/external_processor.proto#envoy-v3-api-msg-service-ext-proc-v3-httpheaders).
func (h headers) proto() *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(h))}
	for _, e := range h {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return m
}

func fromHTTP(r *http.Request) headers {
	h := headers{{":method", r.Method}, {":path", r.URL.RequestURI()}, {":authority", r.Host}, {":scheme", "http"}}
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		for _, v := range vs {
			h = append(h, header{lk, v})
		}
	}
	return h
}

// mutationRules decides which header changes a filter may make
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/common/mutation_rules/v3/mutation_rules.proto):
// host, :authority, :scheme and :method only with allow_all_routing; the
// x-envoy prefix only with allow_envoy; other pseudo-headers such as :path
// are mutable. Removing a pseudo-header or host is never allowed. A rejected
// mutation is dropped and counted (rejected_header_mutations).
func (f *Filter) allowed(key, envoyPrefix string, remove bool) bool {
	if remove && (strings.HasPrefix(key, ":") || key == "host") {
		return false
	}
	switch key {
	case "host", ":authority", ":scheme", ":method":
		return f.AllowAllRouting
	case ":status":
		return !remove
	}
	if strings.HasPrefix(key, envoyPrefix) {
		return f.AllowEnvoy
	}
	return true
}

// applyMutation applies a HeaderMutation and returns how many parts were
// rejected. Values are read from raw_value, else value; a header setting
// both is invalid and rejected. The append_action default is
// APPEND_IF_EXISTS_OR_ADD, as in core.v3.HeaderValueOption
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/core/v3/base.proto#envoy-v3-api-msg-config-core-v3-headervalueoption).
func (f *Filter) applyMutation(h *headers, m *extprocv3.HeaderMutation, envoyPrefix string) (rejected int) {
	if m == nil {
		return 0
	}
	for _, k := range m.GetRemoveHeaders() {
		k = strings.ToLower(k)
		if !f.allowed(k, envoyPrefix, true) {
			rejected++
			continue
		}
		h.del(k)
	}
	for _, o := range m.GetSetHeaders() {
		hv := o.GetHeader()
		k := strings.ToLower(hv.GetKey())
		if k == "" || (hv.GetValue() != "" && len(hv.GetRawValue()) > 0) || !f.allowed(k, envoyPrefix, false) {
			rejected++
			continue
		}
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			rejected++
			continue
		}
		switch o.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			if o.GetAppend() != nil && !o.GetAppend().GetValue() {
				h.set(k, v)
			} else {
				h.add(k, v)
			}
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !h.has(k) {
				h.add(k, v)
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h.set(k, v)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if h.has(k) {
				h.set(k, v)
			}
		}
	}
	return rejected
}
