package envoymsg

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// attrFilterName is the key Envoy files request_attributes under.
const attrFilterName = "envoy.filters.http.ext_proc"

// BodyOverride asks Envoy for an attempt's buffered body when the model
// must be rewritten (upstream filter: request body NONE by default,
// allow_mode_override on). A mode override replaces the whole mode.
var BodyOverride = &extprocfilter.ProcessingMode{
	RequestHeaderMode:   extprocfilter.ProcessingMode_SEND,
	ResponseHeaderMode:  extprocfilter.ProcessingMode_SEND,
	RequestBodyMode:     extprocfilter.ProcessingMode_BUFFERED,
	ResponseBodyMode:    extprocfilter.ProcessingMode_NONE,
	RequestTrailerMode:  extprocfilter.ProcessingMode_SKIP,
	ResponseTrailerMode: extprocfilter.ProcessingMode_SKIP,
}

// HostMetadata reads the chosen endpoint's backend and upstream model.
// Envoy sends a message-typed attribute as its text format in a string
// value (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/advanced/attributes);
// a struct value is accepted too. Texts are parsed once and cached in c.
func (c *HostCache) HostMetadata(attrs map[string]*structpb.Struct) (backend, model string) {
	v := attrs[attrFilterName].GetFields()[contract.AttrUpstreamHostMetadata]
	if text := v.GetStringValue(); text != "" {
		if h, ok := c.get(text); ok {
			return h.backend, h.model
		}
		backend, model = hostMetadata(attrs)
		c.put(text, hostInfo{backend, model})
		return backend, model
	}
	return hostMetadata(attrs)
}

func hostMetadata(attrs map[string]*structpb.Struct) (backend, model string) {
	v := attrs[attrFilterName].GetFields()[contract.AttrUpstreamHostMetadata]
	var fields map[string]*structpb.Value
	switch {
	case v.GetStringValue() != "":
		var md corev3.Metadata
		if err := prototext.Unmarshal([]byte(v.GetStringValue()), &md); err != nil {
			return "", ""
		}
		fields = md.GetFilterMetadata()[contract.MetadataNamespace].GetFields()
	case v.GetStructValue() != nil:
		fm := v.GetStructValue().GetFields()["filter_metadata"].GetStructValue()
		fields = fm.GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
	}
	return fields[contract.EndpointBackend].GetStringValue(), fields[contract.EndpointUpstreamModel].GetStringValue()
}

// AttemptCount is upstream.request_attempt_count (1 for the first).
func AttemptCount(attrs map[string]*structpb.Struct) int {
	v := attrs[attrFilterName].GetFields()[contract.AttrAttemptCount]
	if n := v.GetNumberValue(); n > 0 {
		return int(n)
	}
	n, _ := strconv.Atoi(v.GetStringValue())
	return max(n, 1)
}
