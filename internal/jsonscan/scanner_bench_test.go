package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

func benchStr(b *testing.B, text string, stats bool) {
	raw, _ := json.Marshal(strings.Repeat(text, (1<<16)/len(text)))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		s := Scanner{b: raw}
		var st *TextStats
		var x TextStats
		if stats {
			st = &x
		}
		if _, _, err := s.Str(st); err != nil {
			b.Fatal(err)
		}
	}
}

const prose = "The history of the printing press is usually told as a story about one man and one machine, but the reality was slower and messier. "
const code = "func (s *Server) handle(ctx context.Context, req *Request) (*Response, error) {\n\tif req == nil {\n\t\treturn nil, fmt.Errorf(\"nil request: %w\", ErrBadRequest)\n\t}\n"

func BenchmarkStrProse(b *testing.B)      { benchStr(b, prose, false) }
func BenchmarkStrProseStats(b *testing.B) { benchStr(b, prose, true) }
func BenchmarkStrCode(b *testing.B)       { benchStr(b, code, false) }
func BenchmarkStrCodeStats(b *testing.B)  { benchStr(b, code, true) }

// BenchmarkValidChunk: a chat stream chunk checked whole, against
// encoding/json.Valid.
func BenchmarkValidChunk(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1733400000,"model":"gpt-4o-mini","system_fingerprint":"fp_0","choices":[{"index":0,"delta":{"content":"The quick brown fox jumps over the lazy dog, then explains why in \"quotes\"."},"logprobs":null,"finish_reason":null}],"usage":null}`)
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			if !Valid(chunk) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			if !json.Valid(chunk) {
				b.Fatal("invalid")
			}
		}
	})
}
