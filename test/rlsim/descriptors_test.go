package rlsim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// d renders descriptors as "k=v,k=v+hits" for compact comparison.
func d(ds []*rlcommon.RateLimitDescriptor) string {
	var out []string
	for _, x := range ds {
		var es []string
		for _, e := range x.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		s := strings.Join(es, ",")
		if x.GetHitsAddend() != nil {
			s += "+" + itoa(x.GetHitsAddend().GetValue())
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func meta(key string, v *structpb.Value) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{contract.MetadataNamespace: {Fields: map[string]*structpb.Value{key: v}}}
}

// The descriptors the generated filter config (token limits on) yields.
func TestGeneratedDescriptors(t *testing.T) {
	f, err := New(&ratelimitv3.RateLimit{Domain: "swarmgate", RateLimits: translator.RateLimitActions(true)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// adm is the router-level ext_proc's admission metadata plus extra
	// keys (the stream-done top-up).
	adm := func(kv ...any) map[string]*structpb.Struct {
		f := map[string]*structpb.Value{}
		for i := 0; i+1 < len(kv); i += 2 {
			switch v := kv[i+1].(type) {
			case string:
				f[kv[i].(string)] = structpb.NewStringValue(v)
			case float64:
				f[kv[i].(string)] = structpb.NewNumberValue(v)
			case bool:
				f[kv[i].(string)] = structpb.NewBoolValue(v)
			}
		}
		return map[string]*structpb.Struct{contract.MetadataNamespace: {Fields: f}}
	}
	full := []any{contract.MetaTenant, "t1", contract.MetaModel, "m1", contract.MetaEstTokens, 900.0}
	with := func(extra ...any) map[string]*structpb.Struct {
		return adm(append(append([]any{}, full...), extra...)...)
	}
	tests := []struct {
		name       string
		req        Request
		streamDone bool
		want       string
	}{
		{"admitted request", Request{DynamicMetadata: adm(full...)}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd tenant=t1,model=m1,limit=rpm tenant=t1,limit=tpm+900 tenant=t1,model=m1,limit=tpm+900"},
		{"client headers are never read", Request{Headers: hdr(contract.HeaderPrefix+"tenant", "evil")}, false, ""},
		{"not admitted (no metadata): no descriptor, no call", Request{}, false, ""},
		{"no model: tenant-only descriptors", Request{DynamicMetadata: adm(contract.MetaTenant, "t1", contract.MetaEstTokens, 5.0)}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd tenant=t1,limit=tpm+5"},
		{"no estimate: token descriptors dropped", Request{DynamicMetadata: adm(contract.MetaTenant, "t1")}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd"},
		{"estimate not a number: dropped", Request{DynamicMetadata: adm(contract.MetaTenant, "t1", contract.MetaEstTokens, "many")}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd"},
		{"fractional estimate truncated", Request{DynamicMetadata: adm(contract.MetaTenant, "t1", contract.MetaEstTokens, 12.9)}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd tenant=t1,limit=tpm+12"},
		{"estimate above 1e9: dropped", Request{DynamicMetadata: adm(contract.MetaTenant, "t1", contract.MetaEstTokens, 1000000001.0)}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd"},
		{"negative estimate: dropped", Request{DynamicMetadata: adm(contract.MetaTenant, "t1", contract.MetaEstTokens, -3.0)}, false,
			"tenant=t1,limit=rpm tenant=t1,limit=rpd"},
		// At stream done the upstream filters have stripped every internal
		// header from the shared map: the descriptors must not need them.
		{"stream done: top-up from metadata number, no headers left", Request{DynamicMetadata: with(contract.MetaTokensTopUp, 1500.0)}, true,
			"tenant=t1,limit=tpm+1500 tenant=t1,model=m1,limit=tpm+1500"},
		{"stream done: numeric string", Request{DynamicMetadata: with(contract.MetaTokensTopUp, "7")}, true,
			"tenant=t1,limit=tpm+7 tenant=t1,model=m1,limit=tpm+7"},
		{"stream done: zero top-up is sent", Request{DynamicMetadata: with(contract.MetaTokensTopUp, 0.0)}, true,
			"tenant=t1,limit=tpm+0 tenant=t1,model=m1,limit=tpm+0"},
		{"stream done: no top-up (e.g. refused request)", Request{DynamicMetadata: adm(full...)}, true, ""},
		{"stream done: bool top-up is invalid", Request{DynamicMetadata: with(contract.MetaTokensTopUp, true)}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := d(f.Descriptors(&tc.req, tc.streamDone)); got != tc.want {
				t.Errorf("descriptors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestActions(t *testing.T) {
	reqHdr := func(name, key string, skip bool) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
			RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: key, SkipIfAbsent: skip}}}
	}
	generic := func(key, val string) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
			GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: key, DescriptorValue: val}}}
	}
	metaAct := func(key, def string, skip bool) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_Metadata{Metadata: &routev3.RateLimit_Action_MetaData{
			DescriptorKey: "m", DefaultValue: def, SkipIfAbsent: skip,
			MetadataKey: &metadatav3.MetadataKey{Key: contract.MetadataNamespace, Path: []*metadatav3.MetadataKey_PathSegment{
				{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}}}}}}
	}
	tests := []struct {
		name string
		acts []*routev3.RateLimit_Action
		req  Request
		want string
	}{
		{"generic key defaults to generic_key", []*routev3.RateLimit_Action{generic("", "v")}, Request{}, "generic_key=v"},
		{"header missing, skip_if_absent: entry dropped only",
			[]*routev3.RateLimit_Action{reqHdr("x-a", "a", true), generic("k", "v")}, Request{Headers: hdr()}, "k=v"},
		{"header missing: whole descriptor dropped",
			[]*routev3.RateLimit_Action{reqHdr("x-a", "a", false), generic("k", "v")}, Request{Headers: hdr()}, ""},
		{"first header value wins, name case-insensitive",
			[]*routev3.RateLimit_Action{reqHdr("X-A", "a", false)}, Request{Headers: hdr("x-a", "1", "x-a", "2")}, "a=1"},
		{"metadata string", []*routev3.RateLimit_Action{metaAct("tier", "", false)},
			Request{DynamicMetadata: meta("tier", structpb.NewStringValue("gold"))}, "m=gold"},
		{"metadata not a string: default", []*routev3.RateLimit_Action{metaAct("tier", "std", false)},
			Request{DynamicMetadata: meta("tier", structpb.NewNumberValue(3))}, "m=std"},
		{"metadata missing, no default: dropped", []*routev3.RateLimit_Action{metaAct("tier", "", false)}, Request{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := New(&ratelimitv3.RateLimit{Domain: "d", RateLimits: []*routev3.RateLimit{{Actions: tc.acts}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := d(f.Descriptors(&tc.req, false)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	act := []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
		GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorValue: "v"}}}}
	tests := []struct {
		name string
		rl   *routev3.RateLimit
	}{
		{"number and format", &routev3.RateLimit{Actions: act, HitsAddend: &routev3.RateLimit_HitsAddend{Number: wrapperspb.UInt64(1), Format: "%REQ(x)%"}}},
		{"empty hits_addend", &routev3.RateLimit{Actions: act, HitsAddend: &routev3.RateLimit_HitsAddend{}}},
		{"two substitutions", &routev3.RateLimit{Actions: act, HitsAddend: &routev3.RateLimit_HitsAddend{Format: "%REQ(a)%%REQ(b)%"}}},
		{"text around the substitution", &routev3.RateLimit{Actions: act, HitsAddend: &routev3.RateLimit_HitsAddend{Format: "n=%REQ(a)%"}}},
		{"unmodelled command", &routev3.RateLimit{Actions: act, HitsAddend: &routev3.RateLimit_HitsAddend{Format: "%BYTES_RECEIVED%"}}},
		{"stage", &routev3.RateLimit{Actions: act, Stage: wrapperspb.UInt32(1)}},
		{"disable_key", &routev3.RateLimit{Actions: act, DisableKey: "x"}},
		{"unmodelled action", &routev3.RateLimit{Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(&ratelimitv3.RateLimit{Domain: "d", RateLimits: []*routev3.RateLimit{tc.rl}}, nil); err == nil {
				t.Error("New accepted it")
			}
		})
	}
	if _, err := New(&ratelimitv3.RateLimit{Domain: "d", ResponseHeadersToAdd: []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "retry-after", Value: "%RESPONSE_CODE%"}}}}, nil); err == nil {
		t.Error("New accepted a formatter in response_headers_to_add")
	}
}
