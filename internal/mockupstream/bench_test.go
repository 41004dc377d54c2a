package mockupstream

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// BenchmarkMock measures what one mock can serve to a swarm test, over
// real sockets with keep-alive.
func BenchmarkMock(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			s := New(Options{Keys: testKeys(), CompletionTokens: 32, TokensPerChunk: 4})
			if _, err := s.Start(b.Context(), "127.0.0.1:0"); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			body, _ := json.Marshal(chatBody("a prompt of some length for the benchmark", stream, stream))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+keyA)
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			s.ResetRecords()
		})
	}
}
