package envoymsg

import extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

// BodyReply is a per-stream response-body answer, reused for every chunk:
// gRPC marshals a message inside Send, before the next chunk is handled, so
// a streamed body costs no allocation per chunk.
type BodyReply struct {
	resp   extprocv3.ProcessingResponse
	oneof  extprocv3.ProcessingResponse_ResponseBody
	body   extprocv3.BodyResponse
	common extprocv3.CommonResponse
	mut    extprocv3.BodyMutation
	mutB   extprocv3.BodyMutation_Body
}

// Continue resets the reply to pass the chunk on unchanged and returns it.
func (b *BodyReply) Continue() *extprocv3.ProcessingResponse {
	b.body.Response = nil
	b.oneof.ResponseBody = &b.body
	b.resp.Response = &b.oneof
	b.resp.DynamicMetadata = nil
	return &b.resp
}

// Replace makes the reply replace the chunk by out.
func (b *BodyReply) Replace(out []byte) {
	b.mutB.Body = out
	b.mut.Mutation = &b.mutB
	b.common.BodyMutation = &b.mut
	b.body.Response = &b.common
}

// Replaced is the chunk's replacement, and whether there is one.
func (b *BodyReply) Replaced() ([]byte, bool) {
	if b.body.Response == nil {
		return nil, false
	}
	return b.mutB.Body, true
}
