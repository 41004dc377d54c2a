package responseschat

import (
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

// BenchmarkResponsesChatSSEChunk is the cost of one typical upstream chunk
// (a text delta) of a chat stream translated into Responses events.
func BenchmarkResponsesChatSSEChunk(b *testing.B) {
	b.Run("scanner", func(b *testing.B) { benchmarkResponsesChatSSEChunk(b, false) })
	// The same chunk through encoding/json, as the chunks the scanner
	// leaves (the first, a call's opening, usage) are read.
	b.Run("encoding_json", func(b *testing.B) { benchmarkResponsesChatSSEChunk(b, true) })
}

func benchmarkResponsesChatSSEChunk(b *testing.B, decode bool) {
	first := []byte(`data: {"id":"chatcmpl-CXfY5fStream","object":"chat.completion.chunk","created":1764806412,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	chunk := []byte(`data: {"id":"chatcmpl-CXfY5fStream","object":"chat.completion.chunk","created":1764806412,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"hJ3kQ"}` + "\n\n")
	r := newStream(translate.ResponseOptions{Status: 200, Stream: true, RequestID: "sg-bench"})
	r.noScan = decode
	dst, err := r.Write(nil, first, false)
	if err != nil {
		b.Fatal(err)
	}
	if dst, err = r.Write(dst[:0], chunk, false); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if dst, err = r.Write(dst[:0], chunk, false); err != nil {
			b.Fatal(err)
		}
	}
}
