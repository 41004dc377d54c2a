package swarm

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// reply is what a client saw of one request.
type reply struct {
	status  int
	header  http.Header
	body    string
	err     error
	latency time.Duration
}

const chatBody = `{"model":"` + model + `","messages":[{"role":"user","content":"Plan the next step of the task."}]}`

// post sends one chat completion through the sim with plain HTTP and
// reads the whole answer.
func post(ctx context.Context, hc *http.Client, baseURL, key, requestID string) reply {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/chat/completions", strings.NewReader(chatBody))
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("content-type", "application/json")
	if requestID != "" {
		req.Header.Set("x-request-id", requestID)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return reply{err: err, latency: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b), err: err, latency: time.Since(start)}
}
