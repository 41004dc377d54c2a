package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// adminClient calls the admin key API with a bearer credential.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func newAdminClient(base, token string, timeout time.Duration) *adminClient {
	return &adminClient{base: base, token: token, http: &http.Client{Timeout: timeout}}
}

// apiError is an answer of the key API other than 2xx.
type apiError struct {
	Status  int
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *apiError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%d %s: %s", e.Status, e.Field, e.Message)
	}
	return fmt.Sprintf("%d: %s", e.Status, e.Message)
}

// do sends body (nil for none) as JSON and decodes a 2xx answer into out.
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return errorOf(resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin API: decoding the answer: %w", err)
	}
	return nil
}

// errorOf reads the key API's {"error":{"message","field"}}, or the rest
// of the admin API's {"error":"..."}.
func errorOf(status int, raw []byte) error {
	var keyErr struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal(raw, &keyErr) == nil && keyErr.Error.Message != "" {
		keyErr.Error.Status = status
		return &keyErr.Error
	}
	var plain struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &plain) == nil && plain.Error != "" {
		return &apiError{Status: status, Message: plain.Error}
	}
	return &apiError{Status: status, Message: http.StatusText(status)}
}
