package envoysim

import (
	"errors"
	"net/http"
	"strconv"
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

// http is the map as an http.Header (pseudo-headers included).
func (h headers) http() http.Header {
	out := http.Header{}
	for _, e := range h {
		out.Add(e.key, e.value)
	}
	return out
}

// hopByHop are the connection-level headers Envoy's HTTP/1 codec and HCM
// keep off the request header map (no filter sees them).
var hopByHop = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true, "upgrade": true}

func fromHTTP(r *http.Request) headers {
	h := headers{{":method", r.Method}, {":path", r.URL.RequestURI()}, {":authority", r.Host}, {":scheme", "http"}}
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range vs {
			h = append(h, header{lk, v})
		}
	}
	return h
}

// allowed is the mutation_rules Checker of Envoy 1.38
// (source/extensions/filters/common/mutation_rules/mutation_rules.cc,
// Checker::isAllowed and Checker::isValidValue, v1.38.0): removing host or
// any ":" header is never allowed; host, :authority, :method and :scheme
// need allow_all_routing; the x-envoy prefix needs allow_envoy; appending to
// a ":" header that exists is refused; :status must be a number >= 200.
// disallow_all, disallow_system and the allow/disallow expressions are
// rejected by FromXDS (not modelled).
func (f *Filter) allowed(key, value, envoyPrefix string, remove, appendExisting bool) bool {
	if remove && (strings.HasPrefix(key, ":") || key == "host") {
		return false
	}
	switch key {
	case "host", ":authority", ":scheme", ":method":
		if !f.AllowAllRouting {
			return false
		}
	}
	if strings.HasPrefix(key, ":") && appendExisting {
		return false
	}
	if strings.HasPrefix(key, envoyPrefix) && !f.AllowEnvoy {
		return false
	}
	if remove {
		return true
	}
	if key == ":status" {
		n, err := strconv.Atoi(value)
		return err == nil && n >= 200
	}
	return true
}

// errMutation is a header mutation Envoy refuses as a whole: the filter
// answers the request with status_on_error (500) instead
// (ext_proc.cc Filter::onReceiveMessage → handleErrorResponse, v1.38.0).
var errMutation = errors.New("ext_proc: invalid header mutation")

// applyMutation applies a HeaderMutation the way Envoy 1.38 does
// (source/extensions/filters/http/ext_proc/mutation_utils.cc,
// MutationUtils::applyHeaderMutations, v1.38.0; unchanged since v1.35.0):
//   - the value is read from raw_value ONLY; HeaderValue.value is ignored, so
//     a header sent with only `value` is set to the empty string, and one
//     with both takes raw_value (no error);
//   - append_action is ignored; only the deprecated `append` BoolValue
//     counts, default false: overwrite (setCopy), true: add another value;
//   - a name or value with invalid characters fails the whole response
//     (errMutation), as does a disallowed change when disallow_is_error;
//     otherwise a disallowed change is dropped and counted
//     (rejected_header_mutations).
func (f *Filter) applyMutation(h *headers, m *extprocv3.HeaderMutation, envoyPrefix string) (rejected int, err error) {
	if m == nil {
		return 0, nil
	}
	for _, k := range m.GetRemoveHeaders() {
		if !validName(k) {
			return rejected + 1, errMutation
		}
		k = strings.ToLower(k)
		if !f.allowed(k, "", envoyPrefix, true, false) {
			rejected++
			if f.DisallowIsError {
				return rejected, errMutation
			}
			continue
		}
		h.del(k)
	}
	for _, o := range m.GetSetHeaders() {
		hv := o.GetHeader()
		if hv == nil {
			continue
		}
		v := string(hv.GetRawValue())
		if !validName(hv.GetKey()) || strings.ContainsAny(v, "\r\n\x00") {
			return rejected + 1, errMutation
		}
		k := strings.ToLower(hv.GetKey())
		appendValue := o.GetAppend().GetValue()
		if !f.allowed(k, v, envoyPrefix, false, appendValue && h.has(k)) {
			rejected++
			if f.DisallowIsError {
				return rejected, errMutation
			}
			continue
		}
		if appendValue {
			h.add(k, v)
		} else {
			h.set(k, v)
		}
	}
	return rejected, nil
}

// validName is HeaderUtility::headerNameIsValid: a non-empty token, or a
// pseudo-header name.
func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if c == ':' && i == 0 {
			continue
		}
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return true
}
