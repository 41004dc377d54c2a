package extproc

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/identity"
)

// admitted is what the router-level filter admitted a request with and the
// upstream filter of every attempt needs. It travels as dynamic metadata
// (contract.MetadataNamespace), signed: Envoy's upstream filters share the
// router's request header map (source/common/router/upstream_request.cc,
// UpstreamRequest::acceptHeadersFromRouter, Envoy 1.38), so internal
// headers that one attempt removes before the request leaves Envoy would be
// gone for the next attempt and for the rate-limit filter at stream end.
type admitted struct {
	requestID   string
	tenant      string
	virtualKey  string
	model       string
	estTokens   int
	maxTokens   int
	sticky      string
	path        string
	backends    string // comma-separated
	bodyBytes   int
	issued      int64
	reservation string
}

// maxIdentityAge bounds how old a signed identity an attempt accepts: longer
// than any route timeout the config allows, short enough that a leaked one
// is soon worthless.
const maxIdentityAge = 2 * time.Hour

// appendSigned appends the message the signature covers, every field in
// a fixed order.
func (a *admitted) appendSigned(msg []byte) []byte {
	for _, f := range [...]string{a.requestID, a.tenant, a.virtualKey, a.model, a.sticky, a.path, a.backends} {
		msg = identity.AppendField(msg, f)
	}
	for _, n := range [...]int64{int64(a.estTokens), int64(a.maxTokens), int64(a.bodyBytes), a.issued} {
		msg = identity.AppendInt(msg, n)
	}
	return msg
}

// requestMeta is a reusable dynamic-metadata struct for the request-body
// answer (one per pooled router stream): it is filled per request and
// marshalled inside Send, like tokenMeta.
type requestMeta struct {
	outer, inner structpb.Struct
	ns           structpb.Value
	nsKind       structpb.Value_StructValue
	strs         [len(requestMetaStrings)]structpb.Value
	strKinds     [len(requestMetaStrings)]structpb.Value_StringValue
	nums         [len(requestMetaNumbers)]structpb.Value
	numKinds     [len(requestMetaNumbers)]structpb.Value_NumberValue
	scratch      []byte
}

var (
	requestMetaStrings = [...]string{contract.MetaRequestID, contract.MetaTenant, contract.MetaVirtualKey, contract.MetaModel,
		contract.MetaSticky, contract.MetaPath, contract.MetaBackends, contract.MetaReservation, contract.MetaSignature}
	requestMetaNumbers = [...]string{contract.MetaEstTokens, contract.MetaMaxTokens, contract.MetaBodyBytes, contract.MetaIssued}
)

func (m *requestMeta) fill(sg *identity.Signer, a admitted) *structpb.Struct {
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
		m.outer.Fields = map[string]*structpb.Value{contract.MetadataNamespace: &m.ns}
	}
	m.scratch = a.appendSigned(m.scratch[:0])
	var sb [identity.SigLen]byte
	sig := string(sg.Sign(sb[:0], m.scratch))
	for i, v := range [len(requestMetaStrings)]string{a.requestID, a.tenant, a.virtualKey, a.model, a.sticky, a.path, a.backends, a.reservation, sig} {
		m.strKinds[i].StringValue = v
	}
	for i, v := range [len(requestMetaNumbers)]int64{int64(a.estTokens), int64(a.maxTokens), int64(a.bodyBytes), a.issued} {
		m.numKinds[i].NumberValue = float64(v)
	}
	return &m.outer
}

// readAdmitted reads and verifies the admission facts Envoy forwarded to an
// upstream attempt (metadata_context, metadata_options.forwarding_namespaces).
// ok is false when they are missing, altered, signed with another key or
// too old: the attempt did not come through admission.
func readAdmitted(md *structpb.Struct, sg *identity.Signer, now time.Time) (a admitted, ok bool) {
	f := md.GetFields()
	str := func(k string) string { return f[k].GetStringValue() }
	num := func(k string) int64 { return int64(f[k].GetNumberValue()) }
	a = admitted{
		requestID: str(contract.MetaRequestID), tenant: str(contract.MetaTenant), virtualKey: str(contract.MetaVirtualKey),
		model: str(contract.MetaModel), sticky: str(contract.MetaSticky), path: str(contract.MetaPath), backends: str(contract.MetaBackends),
		estTokens: int(num(contract.MetaEstTokens)), maxTokens: int(num(contract.MetaMaxTokens)),
		bodyBytes: int(num(contract.MetaBodyBytes)), issued: num(contract.MetaIssued), reservation: str(contract.MetaReservation),
	}
	if a.requestID == "" || a.path == "" {
		return a, false
	}
	var buf [512]byte
	if !sg.Verify(str(contract.MetaSignature), a.appendSigned(buf[:0])) {
		return a, false
	}
	age := now.Sub(time.Unix(a.issued, 0))
	return a, age > -time.Minute && age < maxIdentityAge
}

// signerFor is the identity.Signer of a config snapshot; its key is
// derived once per snapshot and cached lock-free.
type signerFor struct {
	cfg    *config.Config
	signer *identity.Signer
}

func (s *Server) signer(c *config.Config) *identity.Signer {
	if cur := s.signerCache.Load(); cur != nil && cur.cfg == c {
		return cur.signer
	}
	sf := &signerFor{cfg: c, signer: identity.NewSigner(c.IdentityKey())}
	s.signerCache.Store(sf)
	return sf.signer
}

// otherBackends appends to dst the backends of the request other than the
// attempt's.
func (a *admitted) otherBackends(dst []string, self string) []string {
	for b := range strings.SplitSeq(a.backends, ",") {
		if b != "" && b != self {
			dst = append(dst, b)
		}
	}
	return dst
}

// label keeps a client-supplied header value only as a printable label:
// at most 256 bytes of visible ASCII and spaces (no CR, LF or other control
// bytes that could smuggle a header), else it is dropped.
func label(v string) string {
	if len(v) > 256 {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return v
}
