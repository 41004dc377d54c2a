package mockupstream

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/logbuf"
	"github.com/swarmgate/swarmgate/internal/porttest"
)

func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestTLSRecordsSNI(t *testing.T) {
	cert, pool := selfSigned(t, "relay.example")
	s := start(t, Options{Keys: testKeys(), Auth: config.AuthAPIKey, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "relay.example"}, ForceAttemptHTTP2: true}}
	body, _ := json.Marshal(chatBody("hi", true, true))
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+"/openai/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Api-Key", keyB)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(sseEvents(t, data)) < 3 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	r := s.Requests()[0]
	if r.SNI != "relay.example" || r.KeyID != "b" || r.Proto != "HTTP/2.0" || r.Host != s.Addr().String() {
		t.Fatalf("record %+v", r)
	}
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func TestH2CAndResetOnHTTP2(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), H2C: true, CompletionTokens: 4})
	do := func() (*http.Response, error) {
		body, _ := json.Marshal(chatBody("hi", true, false))
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyA)
		return h2cClient().Do(req)
	}
	resp, err := do()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("proto %s status %d", resp.Proto, resp.StatusCode)
	}
	s.SetBehavior("a", Behavior{Action: ActResetMidStream, ResetAfterChunks: 1})
	resp, err = do()
	if err != nil {
		t.Fatal(err)
	}
	events, rerr := readEvents(resp.Body)
	resp.Body.Close()
	if rerr == nil || len(events) != 1 {
		t.Fatalf("h2 mid-stream reset: %d events, err %v", len(events), rerr)
	}
	s.SetBehavior("a", Behavior{Action: ActReset})
	if resp, err := do(); err == nil {
		resp.Body.Close()
		t.Fatal("h2 reset: got an answer")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	addr := porttest.Addr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, addr, Options{}) }()
	dctx, dcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer dcancel()
	for {
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if dctx.Err() != nil {
			t.Fatal("Run never listened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-dctx.Done():
		t.Fatal("Run did not return")
	}
}

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k")
	if err := os.WriteFile(keyFile, []byte(keyB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "MOCK_A" {
			return keyA, true
		}
		return "", false
	}
	cases := []struct {
		name    string
		args    []string
		wantErr bool
		check   func(t *testing.T, addr string, o Options)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, addr string, o Options) {
			if addr != "127.0.0.1:18101" || len(o.Keys) != 0 || o.CompletionTokens != 16 || o.ToolCalls {
				t.Fatalf("%s %+v", addr, o)
			}
		}},
		{name: "keys and knobs", args: []string{"--listen", "127.0.0.1:0", "--auth", "x-api-key", "--keys", "a=env:MOCK_A, b=file:" + keyFile,
			"--rpm", "5", "--ttft", "20ms", "--fail-prob", "0.5", "--fail-status", "503", "--models", "x,y"},
			check: func(t *testing.T, addr string, o Options) {
				if addr != "127.0.0.1:0" || o.Auth != config.AuthXAPIKey || len(o.Keys) != 2 || o.Keys[0] != (Key{"a", keyA}) || o.Keys[1] != (Key{"b", keyB}) ||
					o.Default.RPM != 5 || o.TTFT != 20*time.Millisecond || o.Default.FailProbability != 0.5 || o.Default.status() != 503 || len(o.Models) != 2 {
					t.Fatalf("%s %+v", addr, o)
				}
			}},
		{name: "tool calls", args: []string{"--tool-calls"}, check: func(t *testing.T, addr string, o Options) {
			if !o.ToolCalls {
				t.Fatalf("%+v", o)
			}
		}},
		{name: "missing env", args: []string{"--keys", "a=env:NOPE"}, wantErr: true},
		{name: "inline key", args: []string{"--keys", keyA}, wantErr: true},
		{name: "bad auth", args: []string{"--auth", "basic"}, wantErr: true},
		{name: "config without backend", args: []string{"--config", "x.yaml"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("mock-upstream", flag.ContinueOnError)
			f := RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			addr, o, err := f.Options(env)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if err != nil {
				if bytes.Contains([]byte(err.Error()), []byte(keyA)) {
					t.Fatal("key value in error")
				}
				return
			}
			tc.check(t, addr, o.withDefaults())
		})
	}
}

func TestFlagsFromConfig(t *testing.T) {
	env := map[string]string{"SWARMGATE_DEMO_KEY_A1": "sk-a1", "SWARMGATE_DEMO_KEY_A2": "sk-a2", "SWARMGATE_DEMO_KEY_B1": "sk-b1"}
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, config.DefaultYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("mock-upstream", flag.ContinueOnError)
	f := RegisterFlags(fs)
	_ = fs.Parse([]string{"--config", path, "--backend", "relay-b"})
	addr, o, err := f.Options(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:18102" || o.Auth != config.AuthXAPIKey || len(o.Keys) != 1 || o.Keys[0] != (Key{"relay-b-1", "sk-b1"}) {
		t.Fatalf("%s %+v", addr, o)
	}
}

func TestCommand(t *testing.T) {
	t.Setenv("MOCK_CMD_KEY", keyA)
	addr := porttest.Addr(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Command(ctx, []string{"--listen", addr, "--auth", "api-key", "--keys", "k=env:MOCK_CMD_KEY", "-v"}, &out, &errOut)
	}()
	client := newClient()
	deadline := time.Now().Add(5 * time.Second)
	for {
		body, _ := json.Marshal(chatBody("hi", false, false))
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Api-Key", keyA)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Mock-Key-Id") != "k" {
				t.Fatalf("status %d", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings := errOut.String() + out.String(); bytes.Contains([]byte(strings), []byte(keyA)) {
		t.Fatal("key value in command output")
	}
	if err := Command(t.Context(), []string{"--keys", "k=" + keyA}, &out, &errOut); err == nil {
		t.Fatal("inline key accepted")
	}
}
