package admin

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// BenchmarkCreate is key creations through the API, sustained: HTTP over
// loopback, authentication, validation, the store's MULTI (HSET, PUBLISH)
// and the audit XADD, with 8 clients per CPU at once. Target: 1,000/s.
func BenchmarkCreate(b *testing.B) {
	e := startKeyAPI(b, nil)
	body := []byte(`{"tenant":"team-red","limits":{"rpm":60,"tpm":100000},"models":["gpt-4o-mini"],"ttl":"24h","labels":{"run":"bench","agent":"worker"}}`)
	b.SetParallelism(8) // 8 x GOMAXPROCS clients
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, e.URL+"/v1/keys", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			resp, err := e.client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creations/s")
}
