package envoymsg

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// TokenMeta is the dynamic metadata the rate-limit filter reads
// (%DYNAMIC_METADATA(swarmgate:tokens_top_up)%), reusable (one per pooled
// stream): the struct is sent once per request and marshalled inside Send.
// Envoy keeps it only when the namespace is in
// metadata_options.receiving_namespaces.untyped.
type TokenMeta struct {
	outer, inner structpb.Struct
	ns           structpb.Value
	nsKind       structpb.Value_StructValue
	vals         [4]structpb.Value
	nums         [4]structpb.Value_NumberValue
}

var tokenMetaKeys = [4]string{contract.MetaPromptTokens, contract.MetaCompletionTokens, contract.MetaTotalTokens, contract.MetaTokensTopUp}

// Fill sets the figures and returns the struct to send.
func (m *TokenMeta) Fill(prompt, completion, total, topUp int64) *structpb.Struct {
	if m.inner.Fields == nil {
		m.inner.Fields = make(map[string]*structpb.Value, len(tokenMetaKeys))
		for i, k := range tokenMetaKeys {
			m.vals[i].Kind = &m.nums[i]
			m.inner.Fields[k] = &m.vals[i]
		}
		m.nsKind.StructValue = &m.inner
		m.ns.Kind = &m.nsKind
		m.outer.Fields = map[string]*structpb.Value{contract.MetadataNamespace: &m.ns}
	}
	for i, v := range [4]int64{prompt, completion, total, topUp} {
		m.nums[i].NumberValue = float64(v)
	}
	return &m.outer
}

// RequestFields are the request-body answer's metadata: plain fields for
// Envoy's other filters and the signed admission token for the attempts.
type RequestFields struct {
	RequestID, Tenant, VirtualKey, Model, Reservation string
	EstTokens, MaxTokens                              int
	// Token is the signed admission (copied).
	Token []byte
}

// RequestMeta is a reusable dynamic-metadata struct for the request-body
// answer (one per pooled router stream): it is filled per request and
// marshalled inside Send, like TokenMeta. It carries two namespaces:
//
//   - contract.MetadataNamespace, plain fields for Envoy's other filters (the
//     rate-limit filter's descriptors and hits_addend) and the response path;
//   - contract.AdmissionNamespace, one string: the signed admission token,
//     the only thing forwarded to the upstream filter of each attempt, so an
//     attempt decodes one field instead of a Struct of a dozen.
type RequestMeta struct {
	outer, inner, adm structpb.Struct
	ns, admNS         structpb.Value
	nsKind, admKind   structpb.Value_StructValue
	token             structpb.Value
	tokenKind         structpb.Value_StringValue
	strs              [len(requestMetaStrings)]structpb.Value
	strKinds          [len(requestMetaStrings)]structpb.Value_StringValue
	nums              [len(requestMetaNumbers)]structpb.Value
	numKinds          [len(requestMetaNumbers)]structpb.Value_NumberValue
}

var (
	requestMetaStrings = [...]string{contract.MetaRequestID, contract.MetaTenant, contract.MetaVirtualKey, contract.MetaModel,
		contract.MetaReservation}
	requestMetaNumbers = [...]string{contract.MetaEstTokens, contract.MetaMaxTokens}
)

// Fill sets the fields and returns the struct to send.
func (m *RequestMeta) Fill(f RequestFields) *structpb.Struct {
	if m.inner.Fields == nil {
		m.inner.Fields = make(map[string]*structpb.Value, len(requestMetaStrings)+len(requestMetaNumbers))
		for i, k := range requestMetaStrings {
			m.strs[i].Kind = &m.strKinds[i]
			m.inner.Fields[k] = &m.strs[i]
		}
		for i, k := range requestMetaNumbers {
			m.nums[i].Kind = &m.numKinds[i]
			m.inner.Fields[k] = &m.nums[i]
		}
		m.nsKind.StructValue = &m.inner
		m.ns.Kind = &m.nsKind
		m.token.Kind = &m.tokenKind
		m.adm.Fields = map[string]*structpb.Value{contract.MetaAdmission: &m.token}
		m.admKind.StructValue = &m.adm
		m.admNS.Kind = &m.admKind
		m.outer.Fields = map[string]*structpb.Value{contract.MetadataNamespace: &m.ns, contract.AdmissionNamespace: &m.admNS}
	}
	m.tokenKind.StringValue = string(f.Token)
	for i, v := range [len(requestMetaStrings)]string{f.RequestID, f.Tenant, f.VirtualKey, f.Model, f.Reservation} {
		m.strKinds[i].StringValue = v
	}
	for i, v := range [len(requestMetaNumbers)]int64{int64(f.EstTokens), int64(f.MaxTokens)} {
		m.numKinds[i].NumberValue = float64(v)
	}
	return &m.outer
}
