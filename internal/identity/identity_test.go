package identity

import (
	"strings"
	"testing"
)

func TestSignVerify(t *testing.T) {
	msg := func(fields ...string) []byte {
		var b []byte
		for _, f := range fields {
			b = AppendField(b, f)
		}
		return b
	}
	s := NewSigner([]byte("k1"))
	sig := string(s.Sign(nil, msg("rid", "tenant", "model")))
	if len(sig) != SigLen {
		t.Fatalf("signature length %d, want %d", len(sig), SigLen)
	}
	tests := []struct {
		name   string
		signer *Signer
		sig    string
		fields []string
		want   bool
	}{
		{"same fields", s, sig, []string{"rid", "tenant", "model"}, true},
		{"other key", NewSigner([]byte("k2")), sig, []string{"rid", "tenant", "model"}, false},
		{"changed field", s, sig, []string{"rid", "tenant", "model2"}, false},
		{"moved boundary", s, sig, []string{"ri", "dtenant", "model"}, false},
		{"missing field", s, sig, []string{"rid", "tenant"}, false},
		{"empty sig", s, "", []string{"rid", "tenant", "model"}, false},
		{"not hex", s, strings.Repeat("z", SigLen), []string{"rid", "tenant", "model"}, false},
		{"truncated", s, sig[:SigLen-2], []string{"rid", "tenant", "model"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.signer.Verify(tt.sig, msg(tt.fields...)); got != tt.want {
				t.Fatalf("Verify = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAppendInt(t *testing.T) {
	if string(AppendInt(nil, 1234)) != string(AppendField(nil, "1234")) {
		t.Fatal("AppendInt must encode like AppendField of the decimal")
	}
}

func TestNewRequestIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := NewRequestID()
		if !strings.HasPrefix(id, "sg-") || len(id) != 3+2*idBytes {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
}

func BenchmarkSign(b *testing.B) {
	s := NewSigner([]byte("k"))
	buf := make([]byte, 0, SigLen)
	var msg []byte
	b.ReportAllocs()
	for b.Loop() {
		msg = AppendField(msg[:0], "sg-0123456789abcdef01234567")
		msg = AppendField(msg, "tenant-a")
		msg = AppendField(msg, "/v1/chat/completions")
		msg = AppendInt(msg, 1234)
		buf = s.Sign(buf[:0], msg)
	}
}

func TestReadFieldRoundTrip(t *testing.T) {
	msg := AppendField(nil, "sg-1")
	msg = AppendField(msg, "")
	msg = AppendInt(msg, -42)
	f, rest, ok := ReadField(msg)
	if !ok || string(f) != "sg-1" {
		t.Fatalf("first field %q %v", f, ok)
	}
	if f, rest, ok = ReadField(rest); !ok || len(f) != 0 {
		t.Fatalf("empty field %q %v", f, ok)
	}
	n, rest, ok := ReadInt(rest)
	if !ok || n != -42 || len(rest) != 0 {
		t.Fatalf("int %d %v rest %q", n, ok, rest)
	}
	for _, bad := range [][]byte{{0x05, 'a'}, {0xff}, nil} {
		if _, _, ok := ReadField(bad); ok {
			t.Errorf("ReadField(%q) ok", bad)
		}
	}
}
