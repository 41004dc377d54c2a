package envoymsg

import (
	"math"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

func hv(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }

// envoyRequests are the messages Envoy sends an ext_proc server, in the
// forms 1.38 and later use (raw_value headers; attributes and metadata on
// the first message of an upstream stream).
func envoyRequests(t testing.TB) map[string]*extprocv3.ProcessingRequest {
	attrs, err := structpb.NewStruct(map[string]any{"xds.upstream_host_metadata": "filter_metadata { key: \"swarmgate\" }", "upstream.attempt_count": 2.0})
	if err != nil {
		t.Fatal(err)
	}
	admission, err := structpb.NewStruct(map[string]any{"token": "v1.abc", "n": 3.0, "neg": -0.5, "f": false, "": "empty key",
		"nested": map[string]any{"a": []any{"x", true, nil, []any{}, map[string]any{}, map[string]any{"deep": []any{1.0, "é"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	admission.Fields["nan"] = structpb.NewNumberValue(math.NaN())
	admission.Fields["unset"] = &structpb.Value{}
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		hv(":authority", "gateway.local"), hv(":path", "/v1/chat/completions"), hv(":method", "POST"),
		hv("content-type", "application/json"), hv("authorization", "Bearer sk-test"), hv("x-empty", ""),
		{Key: "x-value-form", Value: "plain value"}, hv("x-utf8", "héllo ✓"),
	}}
	return map[string]*extprocv3.ProcessingRequest{
		"request headers": {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers}}},
		"request headers, end of stream": {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headers, EndOfStream: true}}},
		"upstream headers with attributes and metadata": {
			Attributes:      map[string]*structpb.Struct{"envoy.filters.http.ext_proc": attrs, "empty": {}},
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.AdmissionNamespace: admission}},
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headers, Attributes: map[string]*structpb.Struct{"old": attrs}}},
		},
		"response headers":  {Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers}}},
		"empty header map":  {Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}}}},
		"request body":      {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m"}`), EndOfStream: true}}},
		"response body":     {Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n")}}},
		"empty body":        {Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}},
		"body flags":        {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{EndOfStreamWithoutMessage: true, GrpcMessageCompressed: true, DrainComplete: true}}},
		"request trailers":  {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: headers}}},
		"response trailers": {Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
		"observability and protocol config": {ObservabilityMode: true, ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode: 1, ResponseBodyMode: 2}, Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{}}},
		"empty message": {},
	}
}

// TestDecodeMatchesProtobuf: every message Envoy sends decodes by hand,
// to what protobuf-go decodes.
func TestDecodeMatchesProtobuf(t *testing.T) {
	for name, want := range envoyRequests(t) {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got := new(extprocv3.ProcessingRequest)
			if !decodeRequest(append([]byte(nil), b...), got) {
				t.Fatal("hand decoder refused a message Envoy sends")
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decoded\n%v\nwant\n%v", got, want)
			}
		})
	}
}

// TestDecodeFallsBack: what the hand decoder does not take, the codec
// decodes with protobuf-go, errors included.
func TestDecodeFallsBack(t *testing.T) {
	headers, err := proto.Marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv("a", "1")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	unknown := protowire.AppendTag(append([]byte(nil), headers...), 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 7)
	badKey := protowire.AppendTag(nil, protowire.Number(valueKey), protowire.BytesType)
	badKey = protowire.AppendBytes(badKey, []byte{0xff, 0xfe})
	hm := protowire.AppendBytes(protowire.AppendTag(nil, mapHeaders, protowire.BytesType), badKey)
	hh := protowire.AppendBytes(protowire.AppendTag(nil, headersHeaders, protowire.BytesType), hm)
	invalid := protowire.AppendBytes(protowire.AppendTag(nil, reqRequestHeaders, protowire.BytesType), hh)
	tests := []struct {
		name    string
		b       []byte
		wantErr bool
	}{
		{"unknown field kept", unknown, false},
		{"repeated message merged", append(append([]byte(nil), headers...), headers...), false},
		{"invalid UTF-8 header name", invalid, true},
		{"truncated", headers[:len(headers)-1], true},
	}
	c := NewCodec()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if decodeRequest(append([]byte(nil), tt.b...), new(extprocv3.ProcessingRequest)) {
				t.Fatal("hand decoder took a message it must leave to protobuf-go")
			}
			got := new(extprocv3.ProcessingRequest)
			err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.b)}, got)
			want := new(extprocv3.ProcessingRequest)
			wantErr := proto.Unmarshal(tt.b, want)
			if (err != nil) != tt.wantErr || (wantErr != nil) != tt.wantErr {
				t.Fatalf("codec err %v, protobuf-go err %v, want error %v", err, wantErr, tt.wantErr)
			}
			if err == nil && !proto.Equal(got, want) {
				t.Fatalf("codec decoded\n%v\nprotobuf-go\n%v", got, want)
			}
		})
	}
}

// TestDecodedRequestOwnsItsBytes: the request stays intact after gRPC
// reuses the buffer it arrived in.
func TestDecodedRequestOwnsItsBytes(t *testing.T) {
	want := envoyRequests(t)["request headers"]
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got := new(extprocv3.ProcessingRequest)
	if err := NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if !proto.Equal(got, want) {
		t.Fatalf("request changed with the receive buffer:\n%v", got)
	}
}

// TestDecodedBytesDoNotOverlap: appending to one bytes field of a decoded
// request leaves the fields after it in the shared copy as they were.
func TestDecodedBytesDoNotOverlap(t *testing.T) {
	want := envoyRequests(t)["request headers"]
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got := new(extprocv3.ProcessingRequest)
	if !decodeRequest(b, got) {
		t.Fatal("hand decoder refused the message")
	}
	for _, h := range got.GetRequestHeaders().GetHeaders().GetHeaders() {
		if len(h.RawValue) > 0 {
			_ = append(h.RawValue, strings.Repeat("x", 64)...)
		}
	}
	if !proto.Equal(got, want) {
		t.Fatalf("an append to one field changed another:\n%v", got)
	}
}

// FuzzDecodeRequest holds the hand decoder to protobuf-go: whatever it
// takes, protobuf-go decodes to an equal message; whatever protobuf-go
// refuses, it refuses too.
func FuzzDecodeRequest(f *testing.F) {
	for _, m := range envoyRequests(f) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(extprocv3.ProcessingRequest)
		wantErr := proto.Unmarshal(b, want)
		got := new(extprocv3.ProcessingRequest)
		if !decodeRequest(append([]byte(nil), b...), got) {
			return
		}
		if wantErr != nil {
			t.Fatalf("hand decoder took a message protobuf-go refuses: %v", wantErr)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded\n%v\nprotobuf-go\n%v", got, want)
		}
	})
}

func BenchmarkDecodeRequestHeaders(b *testing.B) {
	m := envoyRequests(b)["upstream headers with attributes and metadata"]
	data, err := proto.Marshal(envoyRequests(b)["request headers"])
	if err != nil {
		b.Fatal(err)
	}
	withAttrs, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	c := NewCodec()
	base := c.base
	for _, bc := range []struct {
		name string
		data []byte
	}{{"headers", data}, {"headers+attributes", withAttrs}} {
		b.Run(bc.name+"/hand", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bc.data)}, new(extprocv3.ProcessingRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/protobuf-go", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := base.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bc.data)}, new(extprocv3.ProcessingRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
