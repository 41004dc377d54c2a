package envoysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Response flags the sim sets on a stream (StreamInfo::CoreResponseFlag
// short names); they stay set for the rest of the stream.
const (
	flagNoHealthyUpstream = "UH"
	flagConnectFailure    = "UF"
	flagConnTermination   = "UC"
	flagRetryLimit        = "URX"
	flagOverflow          = "UO"
	flagUpstreamTimeout   = "UT"
	flagNoCluster         = "NC"
	flagRateLimited       = "RL"
	flagRateLimitError    = "RLSE"
)

// localReplyConfig is the HCM's local_reply_config: the first mapper whose
// filter matches rewrites a local reply's status and body
// (source/common/local_reply/local_reply.cc LocalReplyImpl::rewrite,
// v1.38.0). It runs for every local reply, the router-level ext_proc's own
// ImmediateResponse included (DownstreamFilterManager::sendDirectLocalReply),
// with the response flags the stream carries by then.
type localReplyConfig struct {
	mappers []*hcmv3.ResponseMapper
}

// newLocalReplyConfig accepts the mappers the sim can evaluate and rejects
// the rest.
func newLocalReplyConfig(c *hcmv3.LocalReplyConfig) (*localReplyConfig, error) {
	if c == nil {
		return nil, nil
	}
	if c.GetBodyFormat() != nil {
		return nil, errors.New("envoysim: local_reply_config body_format is not modelled")
	}
	for _, m := range c.GetMappers() {
		if err := checkFilter(m.GetFilter()); err != nil {
			return nil, err
		}
		if m.GetBody() != nil {
			return nil, errors.New("envoysim: local_reply_config mapper body is not modelled")
		}
		for _, h := range m.GetHeadersToAdd() {
			if h.GetHeader().GetRawValue() != nil {
				return nil, errors.New("envoysim: local_reply_config headers_to_add raw_value is not modelled")
			}
		}
		if f := m.GetBodyFormatOverride(); f != nil && f.GetJsonFormat() == nil && f.GetTextFormat() == "" {
			return nil, errors.New("envoysim: local_reply_config: only json_format and text_format bodies are modelled")
		}
	}
	return &localReplyConfig{mappers: c.GetMappers()}, nil
}

func checkFilter(f *accesslogv3.AccessLogFilter) error {
	switch v := f.GetFilterSpecifier().(type) {
	case *accesslogv3.AccessLogFilter_AndFilter:
		for _, g := range v.AndFilter.GetFilters() {
			if err := checkFilter(g); err != nil {
				return err
			}
		}
	case *accesslogv3.AccessLogFilter_OrFilter:
		for _, g := range v.OrFilter.GetFilters() {
			if err := checkFilter(g); err != nil {
				return err
			}
		}
	case *accesslogv3.AccessLogFilter_ResponseFlagFilter, *accesslogv3.AccessLogFilter_StatusCodeFilter:
	case *accesslogv3.AccessLogFilter_HeaderFilter:
		hm := v.HeaderFilter.GetHeader()
		if hm.GetStringMatch() == nil || hm.GetInvertMatch() {
			return errors.New("envoysim: local_reply_config header_filter: only string_match is modelled")
		}
	case *accesslogv3.AccessLogFilter_MetadataFilter:
		m := v.MetadataFilter.GetMatcher()
		if len(m.GetPath()) != 1 || (m.GetValue().GetNullMatch() == nil && !m.GetValue().GetPresentMatch()) {
			return errors.New("envoysim: local_reply_config metadata_filter: only null / present match on one key is modelled")
		}
	default:
		return fmt.Errorf("envoysim: local_reply_config filter %T is not modelled", v)
	}
	return nil
}

// rewrite applies the first matching mapper to lr.
func (c *localReplyConfig) rewrite(x *exchange, lr *localReply) {
	if c == nil {
		return
	}
	for _, m := range c.mappers {
		if !x.matchesFilter(m.GetFilter(), lr.status) {
			continue
		}
		if s := m.GetStatusCode(); s != nil {
			lr.status = int(s.GetValue())
		}
		// headers_to_add see the reply's headers before the rewrite
		// (%RESP(name)%), e.g. the rate-limit filter's x-ratelimit-reset.
		for _, h := range m.GetHeadersToAdd() {
			v := substitute(h.GetHeader().GetValue(), lr)
			k := strings.ToLower(h.GetHeader().GetKey())
			if v == "" {
				// An empty value is not added (keep_empty_value false).
				continue
			}
			if h.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD || (h.GetAppend() != nil && !h.GetAppend().GetValue()) {
				lr.header.set(k, v)
			} else {
				lr.header.add(k, v)
			}
		}
		if f := m.GetBodyFormatOverride(); f != nil {
			lr.body = formatBody(f, lr)
			ct := "text/plain"
			if f.GetJsonFormat() != nil {
				ct = "application/json"
			}
			if f.GetContentType() != "" {
				ct = f.GetContentType()
			}
			lr.header.set("content-type", ct)
		}
		return
	}
}

func (x *exchange) matchesFilter(f *accesslogv3.AccessLogFilter, status int) bool {
	switch v := f.GetFilterSpecifier().(type) {
	case *accesslogv3.AccessLogFilter_AndFilter:
		for _, g := range v.AndFilter.GetFilters() {
			if !x.matchesFilter(g, status) {
				return false
			}
		}
		return true
	case *accesslogv3.AccessLogFilter_OrFilter:
		for _, g := range v.OrFilter.GetFilters() {
			if x.matchesFilter(g, status) {
				return true
			}
		}
		return false
	case *accesslogv3.AccessLogFilter_ResponseFlagFilter:
		fl := v.ResponseFlagFilter.GetFlags()
		if len(fl) == 0 {
			return len(x.flags) > 0
		}
		for _, f := range fl {
			if x.flags[f] {
				return true
			}
		}
		return false
	case *accesslogv3.AccessLogFilter_StatusCodeFilter:
		cmp := v.StatusCodeFilter.GetComparison()
		want := int(cmp.GetValue().GetDefaultValue())
		switch cmp.GetOp() {
		case accesslogv3.ComparisonFilter_GE:
			return status >= want
		case accesslogv3.ComparisonFilter_LE:
			return status <= want
		default:
			return status == want
		}
	case *accesslogv3.AccessLogFilter_HeaderFilter:
		hm := v.HeaderFilter.GetHeader()
		k := strings.ToLower(hm.GetName())
		return x.req.has(k) && stringMatch(hm.GetStringMatch(), x.req.get(k))
	case *accesslogv3.AccessLogFilter_MetadataFilter:
		m := v.MetadataFilter.GetMatcher()
		var val *structpb.Value
		if s := x.md.ns[m.GetFilter()]; s != nil {
			val = s.GetFields()[m.GetPath()[0].GetKey()]
		}
		if val == nil {
			// MetadataFilter::evaluate: a missing key matches only with
			// match_if_key_not_found (default true).
			return v.MetadataFilter.GetMatchIfKeyNotFound() == nil || v.MetadataFilter.GetMatchIfKeyNotFound().GetValue()
		}
		if m.GetValue().GetPresentMatch() {
			return true
		}
		_, isNull := val.GetKind().(*structpb.Value_NullValue)
		return isNull
	}
	return false
}

var respRE = regexp.MustCompile(`%RESP\(([^)]+)\)%`)

// substitute fills the format commands the sim knows: %LOCAL_REPLY_BODY%,
// %RESPONSE_CODE%, %RESP(name)% (empty for a missing header).
func substitute(s string, lr *localReply) string {
	s = strings.ReplaceAll(s, "%LOCAL_REPLY_BODY%", string(lr.body))
	s = strings.ReplaceAll(s, "%RESPONSE_CODE%", strconv.Itoa(lr.status))
	return respRE.ReplaceAllStringFunc(s, func(m string) string {
		k := strings.ToLower(respRE.FindStringSubmatch(m)[1])
		return lr.header.get(k)
	})
}

func stringMatch(m *matcherv3.StringMatcher, v string) bool {
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == p.Exact
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, p.Prefix)
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, p.Suffix)
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, p.Contains)
	}
	return false
}

// formatBody renders a body_format_override: %LOCAL_REPLY_BODY% and
// %RESPONSE_CODE% are substituted; a JSON format is printed with sorted
// keys and a trailing newline, and a value that is %RESPONSE_CODE% alone
// stays a number (JsonFormatterImpl keeps a lone command's type, v1.38.0;
// TestModelAgainstEnvoy "mapper: …").
func formatBody(f *corev3.SubstitutionFormatString, lr *localReply) []byte {
	sub := func(s string) string { return substitute(s, lr) }
	if j := f.GetJsonFormat(); j != nil {
		var walk func(v any) any
		walk = func(v any) any {
			switch t := v.(type) {
			case string:
				if t == "%RESPONSE_CODE%" {
					return lr.status
				}
				return sub(t)
			case map[string]any:
				for k, e := range t {
					t[k] = walk(e)
				}
			case []any:
				for i, e := range t {
					t[i] = walk(e)
				}
			}
			return v
		}
		b, _ := json.Marshal(walk(j.AsMap()))
		return append(b, '\n')
	}
	return []byte(sub(f.GetTextFormat()))
}
