package envoymsg

import (
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

func TestImmediate(t *testing.T) {
	resp := AddHeader(Immediate(429, []Header{{"retry-after", "3"}, {"x-ratelimit-limit-tokens", "10"}}, []byte(`{}`), "swarmgate_x"), "x-request-id", "sg-1")
	ir := resp.GetImmediateResponse()
	if ir.GetStatus().GetCode() != 429 || string(ir.GetBody()) != "{}" || ir.GetDetails() != "swarmgate_x" {
		t.Fatalf("answer %v", ir)
	}
	want := [][2]string{{"content-type", "application/json"}, {"retry-after", "3"}, {"x-ratelimit-limit-tokens", "10"}, {"x-request-id", "sg-1"}}
	got := ir.GetHeaders().GetSetHeaders()
	if len(got) != len(want) {
		t.Fatalf("headers %v", got)
	}
	for i, w := range want {
		h := got[i].GetHeader()
		if h.GetKey() != w[0] || string(h.GetRawValue()) != w[1] || h.GetValue() != "" {
			t.Errorf("header %d: %v, want %v in raw_value only", i, h, w)
		}
	}
}

func TestContinueAndAddHeader(t *testing.T) {
	tests := []struct {
		phase Phase
		ok    func(*extprocv3.ProcessingResponse) bool
	}{
		{RequestBody, func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestBody() != nil }},
		{ResponseBody, func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseBody() != nil }},
		{RequestTrailers, func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestTrailers() != nil }},
		{ResponseTrailers, func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseTrailers() != nil }},
	}
	for _, tt := range tests {
		r := AddHeader(Continue(tt.phase), "x-request-id", "sg-1") // no local reply: nothing added
		if !tt.ok(r) || r.GetImmediateResponse() != nil {
			t.Errorf("phase %d: %v", tt.phase, r)
		}
	}
	if d := TimeoutOverride(1500 * time.Millisecond).GetOverrideMessageTimeout().AsDuration(); d != 1500*time.Millisecond {
		t.Errorf("override %v", d)
	}
}

func TestBodyReplyReplaced(t *testing.T) {
	var b BodyReply
	b.Continue()
	if _, ok := b.Replaced(); ok {
		t.Fatal("a fresh reply replaces the chunk")
	}
	b.Replace([]byte("x"))
	if out, ok := b.Replaced(); !ok || string(out) != "x" {
		t.Fatalf("replaced %q %v", out, ok)
	}
	if resp := b.Continue(); resp.GetResponseBody().GetResponse() != nil {
		t.Fatal("Continue kept the last chunk's replacement")
	}
}
