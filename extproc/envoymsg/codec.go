package envoymsg

import (
	"errors"
	"fmt"
	"sync"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec is grpc-go's protobuf codec with shortcuts for the ext_proc
// service: Envoy's requests are decoded by hand (decode.go), and for its
// answers the shapes the data path sends (encode.go) and a
// ProcessingResponse's dynamic_metadata (a google.protobuf.Struct, i.e.
// maps of Values, which protobuf-go marshals through reflection) are
// encoded by hand. Under load, encoding the answers cost protobuf-go about
// 19 us per JSON request, more than handling them. The bytes are the same
// protobuf (only map order may differ, which protobuf leaves unspecified).
// Everything else goes to the default codec.
type Codec struct {
	base encoding.CodecV2
	// scratch holds *[]byte buffers a Struct is encoded into before its
	// length is known.
	scratch sync.Pool
}

// NewCodec returns the codec; install it with grpc.ForceServerCodecV2 (see
// GRPCServerOptions).
func NewCodec() *Codec {
	return &Codec{
		base:    encoding.GetCodecV2(grpcproto.Name),
		scratch: sync.Pool{New: func() any { return new([]byte) }},
	}
}

// Name is the content-subtype, the same as the default codec's.
func (c *Codec) Name() string { return grpcproto.Name }

// Unmarshal decodes an Envoy ProcessingRequest by hand (decode.go) when it
// has the shape Envoy sends, and everything else with the default codec.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*extprocv3.ProcessingRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	// An owned copy: the request's strings and bytes share it, and gRPC
	// reuses data's buffers once Unmarshal returns.
	buf := data.Materialize()
	if decodeRequest(buf, r) {
		return nil
	}
	proto.Reset(r)
	if err := proto.Unmarshal(buf, r); err != nil {
		return fmt.Errorf("extproc: unmarshal request: %w", err)
	}
	return nil
}

// dynamicMetadataField is ProcessingResponse.dynamic_metadata's number.
var dynamicMetadataField = protowire.Number((&extprocv3.ProcessingResponse{}).ProtoReflect().Descriptor().Fields().ByName("dynamic_metadata").Number())

// Marshal encodes v; see Codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*extprocv3.ProcessingResponse)
	if !ok {
		return c.base.Marshal(v)
	}
	md := r.DynamicMetadata
	var mdBody []byte
	if md != nil {
		scratch := c.scratch.Get().(*[]byte)
		defer c.scratch.Put(scratch)
		var ok bool
		if mdBody, ok = appendStructBody((*scratch)[:0], md); !ok {
			return nil, errors.New("extproc: marshal response: dynamic_metadata: string field contains invalid UTF-8")
		}
		if cap(mdBody) <= 64<<10 {
			*scratch = mdBody
		}
	}
	hand := encodable(r)
	if !hand && md == nil {
		return c.base.Marshal(v)
	}
	var rest int
	var z answerSizes
	if hand {
		z = sizeResponse(r)
		rest = z.total
	} else {
		// The response belongs to the sending goroutine until Send
		// returns, so it may be lent without its metadata for the call.
		r.DynamicMetadata = nil
		defer func() { r.DynamicMetadata = md }()
		// Size without the cache (the reused per-stream answers change
		// between Sends), then marshal with the sizes it just cached.
		rest = proto.Size(r)
	}
	size := rest
	if md != nil {
		size += protowire.SizeTag(dynamicMetadataField) + protowire.SizeBytes(len(mdBody))
	}
	var b []byte
	var buf *[]byte
	pool := mem.DefaultBufferPool()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b = make([]byte, 0, size)
	} else {
		buf = pool.Get(size)
		b = (*buf)[:0]
	}
	if hand {
		b = appendResponse(b, r, z)
	} else {
		var err error
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, r); err != nil {
			if buf != nil {
				pool.Put(buf)
			}
			return nil, fmt.Errorf("extproc: marshal response: %w", err)
		}
	}
	if md != nil {
		b = protowire.AppendTag(b, dynamicMetadataField, protowire.BytesType)
		b = protowire.AppendBytes(b, mdBody)
	}
	if buf == nil {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
