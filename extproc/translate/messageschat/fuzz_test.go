package messageschat

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

func seeds(f *testing.F, name string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "anthropic_messages_to_chat_completions", "*", name))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(7))
	}
}

func FuzzMessagesChatRequest(f *testing.F) {
	seeds(f, "request.in.json")
	tr := New()
	f.Fuzz(func(t *testing.T, body []byte, _ uint8) {
		out, err := tr.Request(body, translate.RequestOptions{Model: "m"})
		if err != nil {
			return
		}
		var v struct {
			Model    string            `json:"model"`
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(out, &v); err != nil || v.Model != "m" {
			t.Fatalf("translated request is not a chat request (%v):\n%s", err, out)
		}
	})
}

func FuzzMessagesChatResponseSSE(f *testing.F) {
	seeds(f, "response.in.sse")
	tr := New()
	f.Fuzz(func(t *testing.T, in []byte, size uint8) {
		run := func(size int) ([]byte, bool) {
			r := tr.NewResponse(translate.ResponseOptions{Status: 200, Stream: true, RequestID: "sg-fuzz"})
			var out []byte
			var err error
			for i := 0; ; i += size {
				j := min(i+size, len(in))
				if out, err = r.Write(out, in[i:j], j == len(in)); err != nil || j == len(in) {
					return out, err == nil
				}
			}
		}
		whole, ok := run(max(len(in), 1))
		chunked, cok := run(int(size%64) + 1)
		if ok != cok || !bytes.Equal(whole, chunked) {
			t.Fatalf("chunks of %d translate differently:\n%s\nwhole:\n%s", size%64+1, chunked, whole)
		}
		var p translate.Events
		err := p.Feed(whole, true, func(e translate.Event) error {
			if len(e.Name) == 0 || !json.Valid(e.Data) {
				t.Fatalf("bad event %q: %s\nin the output:\n%s", e.Name, e.Data, whole)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok && !bytes.HasSuffix(whole, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")) && !bytes.Contains(whole, []byte("event: error\n")) {
			t.Fatalf("the stream ends in neither message_stop nor an error:\n%s", whole)
		}
	})
}

func BenchmarkMessagesChatSSEChunk(b *testing.B) {
	tr := New()
	r := tr.NewResponse(translate.ResponseOptions{Status: 200, Stream: true, RequestID: "sg-bench"})
	first := []byte(`data: {"id":"chatcmpl-CZ1dB2cD3eF4gH5iJ6kL7mN8oP9t","object":"chat.completion.chunk","created":1764806400,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_b3f1157249","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	chunk := []byte(`data: {"id":"chatcmpl-CZ1dB2cD3eF4gH5iJ6kL7mN8oP9t","object":"chat.completion.chunk","created":1764806400,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_b3f1157249","choices":[{"index":0,"delta":{"content":" the quick brown"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Xc3"}` + "\n\n")
	dst, err := r.Write(nil, first, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = r.Write(dst[:0], chunk, false); err != nil {
			b.Fatal(err)
		}
	}
}
