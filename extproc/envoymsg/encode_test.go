package envoymsg

import (
	"bytes"
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomAnswer builds a headers or body answer of the shapes encode.go
// handles, with every optional part present or not.
func randomAnswer(rng *rand.Rand) *extprocv3.ProcessingResponse {
	str := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	var c *extprocv3.CommonResponse
	if rng.IntN(5) > 0 {
		c = &extprocv3.CommonResponse{ClearRouteCache: rng.IntN(2) == 0}
		if rng.IntN(4) == 0 {
			c.Status = extprocv3.CommonResponse_CONTINUE_AND_REPLACE
		}
		if rng.IntN(4) > 0 {
			m := &extprocv3.HeaderMutation{}
			for range rng.IntN(14) {
				o := &corev3.HeaderValueOption{AppendAction: corev3.HeaderValueOption_HeaderAppendAction(rng.IntN(4)), KeepEmptyValue: rng.IntN(5) == 0}
				if rng.IntN(6) > 0 {
					o.Header = &corev3.HeaderValue{Key: str(), Value: str()}
					if rng.IntN(2) == 0 {
						o.Header.RawValue = []byte(str())
					}
				}
				m.SetHeaders = append(m.SetHeaders, o)
			}
			for range rng.IntN(14) {
				m.RemoveHeaders = append(m.RemoveHeaders, str())
			}
			c.HeaderMutation = m
		}
		if rng.IntN(3) == 0 {
			body := bytes.Repeat([]byte("x"), rng.IntN(3)*rng.IntN(3000)) // empty bodies too
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
		}
	}
	r := &extprocv3.ProcessingResponse{}
	switch rng.IntN(5) {
	case 0:
		r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}}
	case 1:
		r.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: c}}
	case 2:
		r.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}
	case 3:
		r.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: c}}
	}
	return r
}

// The hand encoder writes exactly protobuf-go's bytes for every shape it
// takes, and hands the others to protobuf-go.
func TestEncodeMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCodec()
	det := proto.MarshalOptions{Deterministic: true}
	check := func(r *extprocv3.ProcessingResponse, wantHand bool) {
		t.Helper()
		if encodable(r) != wantHand {
			t.Fatalf("encodable = %v, want %v: %v", !wantHand, wantHand, r)
		}
		want, err := det.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("bytes differ for %v:\n got %x\nwant %x", r, got, want)
		}
		data.Free()
	}
	for range 5000 {
		check(randomAnswer(rng), true)
	}
	body := &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}
	for _, r := range []*extprocv3.ProcessingResponse{
		{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: []byte("{}")}}},
		{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}},
		{Response: body, ModeOverride: &extprocfilter.ProcessingMode{RequestBodyMode: extprocfilter.ProcessingMode_BUFFERED}},
		{Response: body, RequestDrain: true},
		{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}}}},
		{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Append: wrapperspb.Bool(true)}}}}}}},
	} {
		check(r, false)
	}
	// Invalid UTF-8 is protobuf-go's error to give, not ours to send.
	bad := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"\xff"}}}}}}
	if _, err := c.Marshal(bad); err == nil {
		t.Error("invalid UTF-8 header name encoded")
	}
}

// The answers the handlers really build, one request through both
// filters, go the hand path.
func TestHandlerAnswersAreHandEncoded(t *testing.T) {
	var a Answer
	for _, p := range []Phase{RequestHeaders, RequestBody, ResponseHeaders} {
		resp, _ := a.Start(p)
		a.Set("x-swarmgate-tenant", "alpha")
		a.SetInt("content-length", 42)
		a.SetBearer("sk-test")
		a.Remove("authorization")
		if p == RequestBody {
			a.SetBody([]byte(`{"model":"m"}`))
		}
		if !encodable(resp) {
			t.Errorf("phase %d answer not hand-encodable", p)
		}
	}
	var br BodyReply
	resp := br.Continue()
	br.Replace([]byte("data: x\n\n"))
	resp.DynamicMetadata = metadataFor(Usage{PromptTokens: 1}, 0)
	if !encodable(resp) {
		t.Error("body answer not hand-encodable")
	}
}

func BenchmarkEncodeAnswer(b *testing.B) {
	var a Answer
	resp, _ := a.Start(RequestBody)
	for _, k := range []string{"x-swarmgate-pool", "x-swarmgate-tenant", "x-swarmgate-key-id", "x-swarmgate-model", "x-swarmgate-est-tokens", "x-swarmgate-max-tokens"} {
		a.Set(k, "some-value-1234")
	}
	a.Remove("accept-encoding")
	b.Run("protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	c := NewCodec()
	b.Run("swarmgate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := c.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			d.Free()
		}
	})
}

// A reused answer carries nothing of the previous message: no header, no
// body, no override, and the previous credential's bytes are cleared.
func TestAnswerReuse(t *testing.T) {
	var a Answer
	resp, _ := a.Start(RequestBody)
	a.SetBearer("sk-secret-upstream-key") // into the answer's own bytes
	for range answerSets + 3 {            // past the arrays, into allocated options
		a.Set("x-h", "v")
	}
	a.Remove("x-gone")
	a.SetBody([]byte("{}"))
	resp.ModeOverride = BodyOverride
	resp, common := a.Start(ResponseHeaders)
	a.Set("x-swarmgate-backend", "b")
	if resp.GetResponseHeaders() == nil || resp.ModeOverride != nil || common.BodyMutation != nil || common.ClearRouteCache {
		t.Fatalf("state carried over: %v", resp)
	}
	m := common.GetHeaderMutation()
	if len(m.GetSetHeaders()) != 1 || len(m.GetRemoveHeaders()) != 0 {
		t.Fatalf("mutation carried over: %v", m)
	}
	if bytes.Contains(a.raw[:cap(a.raw)], []byte("sk-secret")) {
		t.Error("the previous answer's credential is still in the reused buffer")
	}
	data, err := NewCodec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var back extprocv3.ProcessingResponse
	if err := proto.Unmarshal(data.Materialize(), &back); err != nil || !proto.Equal(&back, resp) {
		t.Fatalf("reused answer does not round-trip: %v %v", &back, err)
	}
}
