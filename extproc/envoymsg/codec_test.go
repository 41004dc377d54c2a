package envoymsg

import (
	"math"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

func TestCodecMarshalsLikeProto(t *testing.T) {
	nested, err := structpb.NewStruct(map[string]any{
		"n": 1.5, "zero": 0.0, "neg": -3.0, "s": "héllo", "empty": "", "t": true, "f": false, "null": nil,
		"list":  []any{1.0, "x", nil, true, map[string]any{"a": []any{}}, []any{2.0}},
		"inner": map[string]any{"deep": map[string]any{"k": "v"}, "e": map[string]any{}},
		"":      "empty key",
	})
	if err != nil {
		t.Fatal(err)
	}
	nested.Fields["nan"] = structpb.NewNumberValue(math.NaN())
	nested.Fields["unset"] = &structpb.Value{}
	tests := []struct {
		name string
		resp *extprocv3.ProcessingResponse
	}{
		{"token metadata", &extprocv3.ProcessingResponse{
			Response:        &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}},
			DynamicMetadata: metadataFor(Usage{PromptTokens: 120, CompletionTokens: 7, TotalTokens: 127}, 100),
		}},
		{"every value kind", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders:    []*corev3.HeaderValueOption{SetHeader("x-a", "1")},
					RemoveHeaders: []string{"x-b"}}}}},
			DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{contract.MetadataNamespace: structpb.NewStructValue(nested)}},
		}},
		{"empty metadata", &extprocv3.ProcessingResponse{DynamicMetadata: &structpb.Struct{}}},
		// Payloads of 1, 2 and 3 length bytes at every nesting level.
		{"long values", &extprocv3.ProcessingResponse{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"short": structpb.NewStringValue(strings.Repeat("a", 100)),
			"two":   structpb.NewStringValue(strings.Repeat("b", 300)),
			"three": structpb.NewStringValue(strings.Repeat("c", 20000)),
			"deep": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
					structpb.NewStringValue(strings.Repeat("d", 127)), structpb.NewStringValue(strings.Repeat("e", 128)),
					structpb.NewStringValue(strings.Repeat("f", 16400)), {},
				}}),
			}}),
		}}}},
		{"no metadata", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}},
	}
	c := NewCodec()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := tt.resp.DynamicMetadata
			data, err := c.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			if tt.resp.DynamicMetadata != md {
				t.Fatal("Marshal did not restore the metadata")
			}
			got := data.Materialize()
			data.Free()
			want, err := proto.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("size %d, protobuf-go %d", len(got), len(want))
			}
			var back extprocv3.ProcessingResponse
			if err := proto.Unmarshal(got, &back); err != nil {
				t.Fatalf("our bytes do not parse: %v", err)
			}
			if !proto.Equal(&back, tt.resp) && tt.name != "every value kind" { // NaN != NaN
				t.Errorf("round trip:\n got %v\nwant %v", &back, tt.resp)
			}
			if tt.name == "every value kind" {
				f := back.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
				if !math.IsNaN(f["nan"].GetNumberValue()) || f["s"].GetStringValue() != "héllo" || f[""].GetStringValue() != "empty key" ||
					len(f["list"].GetListValue().GetValues()) != 6 || f["inner"].GetStructValue().GetFields()["deep"].GetStructValue().GetFields()["k"].GetStringValue() != "v" {
					t.Errorf("round trip lost values: %v", f)
				}
				delete(f, "nan")
				delete(nested.Fields, "nan")
				defer func() { nested.Fields["nan"] = structpb.NewNumberValue(math.NaN()) }()
				if !proto.Equal(&back, tt.resp) {
					t.Errorf("round trip:\n got %v\nwant %v", &back, tt.resp)
				}
			}
		})
	}
}

func TestCodecRejectsInvalidUTF8LikeProto(t *testing.T) {
	resp := &extprocv3.ProcessingResponse{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"k": structpb.NewStringValue("\xff")}}}
	if _, err := proto.Marshal(resp); err == nil {
		t.Fatal("protobuf-go accepted invalid UTF-8; this test's premise is gone")
	}
	if _, err := NewCodec().Marshal(resp); err == nil {
		t.Error("codec accepted invalid UTF-8 in dynamic metadata")
	}
}

func TestCodecNameAndOtherMessages(t *testing.T) {
	c := NewCodec()
	if c.Name() != grpcproto.Name {
		t.Errorf("Name = %q", c.Name())
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}}
	data, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back extprocv3.ProcessingRequest
	if err := c.Unmarshal(data, &back); err != nil || !proto.Equal(&back, req) {
		t.Errorf("round trip of a request: %v %v", &back, err)
	}
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Error("non-proto value marshalled")
	}
	_ = encoding.CodecV2(c)
}

func BenchmarkCodecMarshal(b *testing.B) {
	resp := &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}},
		DynamicMetadata: metadataFor(Usage{PromptTokens: 1200, CompletionTokens: 350, TotalTokens: 1550}, 1000),
	}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"protobuf-go", encoding.GetCodecV2(grpcproto.Name)}, {"swarmgate", NewCodec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				d.Free()
			}
		})
	}
}

// The per-stream answers are reused between Sends: a size cached by the
// previous Marshal must not be trusted.
func TestCodecReusedMessage(t *testing.T) {
	var br BodyReply
	c := NewCodec()
	for i, chunk := range []string{"", "data: {}\n\n", "x"} {
		resp := br.Continue()
		if chunk != "" {
			br.Replace([]byte(chunk))
		}
		resp.DynamicMetadata = metadataFor(Usage{PromptTokens: int64(i)}, 0)
		data, err := c.Marshal(resp)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		var back extprocv3.ProcessingResponse
		if err := proto.Unmarshal(data.Materialize(), &back); err != nil || !proto.Equal(&back, resp) {
			t.Fatalf("send %d: %v %v", i, &back, err)
		}
		data.Free()
	}
}

// Usage and metadataFor build the token metadata as the router-level
// filter does (extproc), for the encoding tests.
type Usage struct{ PromptTokens, CompletionTokens, TotalTokens int64 }

func metadataFor(u Usage, est int) *structpb.Struct {
	topUp := u.CompletionTokens
	if extra := u.PromptTokens - int64(est); extra > 0 {
		topUp += extra
	}
	var m TokenMeta
	return m.Fill(u.PromptTokens, u.CompletionTokens, u.TotalTokens, topUp)
}
