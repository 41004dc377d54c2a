package telemetry

import (
	"strings"
	"testing"
)

func TestRedactBody(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		secrets []string // must not survive
		keep    []string // must survive
	}{
		{"openai key in prose",
			`{"messages":[{"role":"user","content":"my key is sk-proj-AbC123xyz_987-QQ please"}]}`,
			[]string{"sk-proj-AbC123xyz_987-QQ", "AbC123xyz"}, []string{`"role":"user"`, "my key is", "please"}},
		{"anthropic key",
			`key=sk-ant-api03-ZZZZZZZZZZZZZZZZ`, []string{"ZZZZZZZZZZZZZZZZ"}, []string{"key="}},
		{"swarmgate virtual key",
			`{"content":"sk-swarmgate-demo"}`, []string{"sk-swarmgate-demo"}, []string{`"content"`}},
		{"json api_key member of any shape",
			`{"api_key":"hunter2","model":"gpt-4o"}`, []string{"hunter2"}, []string{`"model":"gpt-4o"`, `"api_key"`}},
		{"json authorization member with escapes",
			`{"Authorization":"Bearer abc\"def","x":1}`, []string{"abc", "def"}, []string{`"x":1`}},
		{"json password and token",
			`{"password": "p4ss", "access_token":"tok123", "Token":"t2"}`, []string{"p4ss", "tok123", `"t2"`}, []string{`"password"`}},
		{"header lines",
			"Authorization: Bearer opaque-credential-1\r\nx-api-key: opaque2\r\nContent-Type: application/json\r\n",
			[]string{"opaque-credential-1", "opaque2"}, []string{"Content-Type: application/json"}},
		{"bearer in text",
			`token was "Bearer abcdEFGH12345" yesterday`, []string{"abcdEFGH12345"}, []string{"yesterday"}},
		{"query parameter",
			`https://generativelanguage.googleapis.com/v1/models?key=AIzaSyA1234567890abcdefghijklmnopqrstuv&alt=sse`,
			[]string{"AIzaSyA1234567890abcdefghijklmnopqrstuv"}, []string{"alt=sse"}},
		{"github token and jwt",
			`ghp_abcdefghijklmnopqrstuvwxyz0123 eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl`,
			[]string{"ghp_abcdefghijklmnopqrstuvwxyz0123", "eyJzdWIiOiIxMjM0NTYifQ"}, nil},
		{"nothing secret",
			`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"ask about skeleton keys"}]}`,
			nil, []string{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"ask about skeleton keys"}]}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := RedactBody([]byte(c.in))
			for _, s := range c.secrets {
				if strings.Contains(out, s) {
					t.Errorf("secret %q survived: %s", s, out)
				}
			}
			for _, k := range c.keep {
				if !strings.Contains(out, k) {
					t.Errorf("lost %q: %s", k, out)
				}
			}
			if len(c.secrets) > 0 && !strings.Contains(out, Redacted) {
				t.Errorf("no %s marker: %s", Redacted, out)
			}
		})
	}
}

func TestRedactHeaders(t *testing.T) {
	in := map[string]string{
		"authorization":   "Bearer sk-live-123456789",
		"x-api-key":       "plain-opaque",
		"x-session-token": "opaque3",
		"user-agent":      "openai-python/1.0 sk-embedded-12345678",
		"content-type":    "application/json",
	}
	out := RedactHeaders(in)
	for _, k := range []string{"authorization", "x-api-key", "x-session-token"} {
		if out[k] != Redacted {
			t.Errorf("%s = %q, want redacted", k, out[k])
		}
	}
	if strings.Contains(out["user-agent"], "sk-embedded") || !strings.HasPrefix(out["user-agent"], "openai-python/1.0") {
		t.Errorf("user-agent = %q", out["user-agent"])
	}
	if out["content-type"] != "application/json" {
		t.Errorf("content-type = %q", out["content-type"])
	}
	if in["authorization"] != "Bearer sk-live-123456789" {
		t.Error("input modified")
	}
}

func FuzzRedactBody(f *testing.F) {
	f.Add("hello", "sk-abcdefgh12")
	f.Add(`{"api_key":"`, `"}`)
	f.Fuzz(func(t *testing.T, prefix, suffix string) {
		// A provider-shaped key inserted between separators never survives.
		secret := "sk-Fz9" + "q7Lm2Xw8"
		out := RedactBody([]byte(prefix + " " + secret + " " + suffix))
		if strings.Contains(out, secret) {
			t.Fatalf("secret survived in %q", out)
		}
	})
}

func BenchmarkRedactBody(b *testing.B) {
	body := []byte(strings.Repeat(`{"role":"user","content":"some ordinary prompt text with sk-abcdefghijkl inside"},`, 100))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_ = RedactBody(body)
	}
}
