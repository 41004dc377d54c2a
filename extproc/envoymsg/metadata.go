package envoymsg

import (
	"strconv"

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
	// SubkeyRPM, SubkeyRPD, SubkeyTPM are a sub-key's own limits, each
	// sent (contract.MetaSubkeyRPM…) only when positive: the rate-limit
	// filter sends a sub-key descriptor only for a limit it finds here.
	SubkeyRPM, SubkeyRPD, SubkeyTPM int
	// ParentKey and ParentRPM, ParentRPD, ParentTPM are the limits of the
	// sub-key that minted it (contract.MetaParentKey…), sent the same way;
	// the id only when one of them is.
	ParentKey                       string
	ParentRPM, ParentRPD, ParentTPM int
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
	quotas            [len(requestMetaQuotas)]quotaField
	parentKind        structpb.Value_StringValue
	parentVal         structpb.Value
}

// quotaField is one sub-key limit as a metadata string. The text of the
// last value is kept: a pooled stream serving the same sub-key again
// formats nothing.
type quotaField struct {
	v    structpb.Value
	kind structpb.Value_StringValue
	n    int
}

func (q *quotaField) set(fields map[string]*structpb.Value, key string, n int) {
	if n <= 0 {
		delete(fields, key)
		return
	}
	if n != q.n || q.kind.StringValue == "" {
		q.n, q.kind.StringValue = n, strconv.Itoa(n)
	}
	q.v.Kind = &q.kind
	fields[key] = &q.v
}

var (
	requestMetaStrings = [...]string{contract.MetaRequestID, contract.MetaTenant, contract.MetaVirtualKey, contract.MetaModel,
		contract.MetaReservation}
	requestMetaNumbers = [...]string{contract.MetaEstTokens, contract.MetaMaxTokens}
	requestMetaQuotas  = [...]string{contract.MetaSubkeyRPM, contract.MetaSubkeyRPD, contract.MetaSubkeyTPM,
		contract.MetaParentRPM, contract.MetaParentRPD, contract.MetaParentTPM}
)

// Fill sets the fields and returns the struct to send.
func (m *RequestMeta) Fill(f RequestFields) *structpb.Struct {
	if m.inner.Fields == nil {
		m.inner.Fields = make(map[string]*structpb.Value, len(requestMetaStrings)+len(requestMetaNumbers)+len(requestMetaQuotas))
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
	parent := f.ParentKey != "" && (f.ParentRPM > 0 || f.ParentRPD > 0 || f.ParentTPM > 0)
	if !parent {
		f.ParentRPM, f.ParentRPD, f.ParentTPM = 0, 0, 0
	}
	for i, n := range [len(requestMetaQuotas)]int{f.SubkeyRPM, f.SubkeyRPD, f.SubkeyTPM, f.ParentRPM, f.ParentRPD, f.ParentTPM} {
		m.quotas[i].set(m.inner.Fields, requestMetaQuotas[i], n)
	}
	if parent {
		m.parentKind.StringValue = f.ParentKey
		m.parentVal.Kind = &m.parentKind
		m.inner.Fields[contract.MetaParentKey] = &m.parentVal
	} else {
		delete(m.inner.Fields, contract.MetaParentKey)
	}
	return &m.outer
}
