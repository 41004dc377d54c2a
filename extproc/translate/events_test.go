package translate

import (
	"strings"
	"testing"
)

func TestEventsAcrossChunks(t *testing.T) {
	const stream = "event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\n\ndata: one\ndata: two\n\nevent: b\rdata: last"
	want := []string{"a|{\"x\":1}", "|one\ntwo", "b|last"}
	for size := 1; size <= len(stream); size++ {
		var p Events
		var got []string
		fn := func(e Event) error { got = append(got, string(e.Name)+"|"+string(e.Data)); return nil }
		for i := 0; i < len(stream); i += size {
			j := min(i+size, len(stream))
			if err := p.Feed([]byte(stream[i:j]), j == len(stream), fn); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Join(got, ";") != strings.Join(want, ";") {
			t.Fatalf("chunks of %d: got %q, want %q", size, got, want)
		}
	}
}

func TestEventTooLarge(t *testing.T) {
	var p Events
	big := "data: " + strings.Repeat("x", maxEvent+1)
	if err := p.Feed([]byte(big), false, func(Event) error { return nil }); err != ErrEventTooLarge {
		t.Fatalf("got %v, want ErrEventTooLarge", err)
	}
}

func TestErrorBodyShapes(t *testing.T) {
	tests := []struct {
		name, body string
		to         int
		want       string
	}{
		{"openai to anthropic", `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`, 1,
			`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`},
		{"anthropic to openai", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 0,
			`{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}`},
		{"text to openai", `upstream connect error`, 0,
			`{"error":{"message":"upstream connect error","type":"upstream_error","param":null,"code":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := 429
			if tt.to == 0 {
				status = 529
			}
			got := string(ErrorBody([]byte(tt.body), status, shape(tt.to)))
			if got != tt.want {
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestStreamErrorClass: an error inside a stream keeps its class in the
// client's family.
func TestStreamErrorClass(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"error":{"message":"slow down","type":"tokens","code":"rate_limit_exceeded"}}`, `"type":"rate_limit_error"`},
		{`{"error":{"message":"bad","type":"invalid_request_error"}}`, `"type":"invalid_request_error"`},
		{`{"error":{"message":"busy","type":"server_error"}}`, `"type":"api_error"`},
	}
	for _, tt := range tests {
		if got := string(ErrorBody([]byte(tt.body), 0, shape(1))); !strings.Contains(got, tt.want) {
			t.Errorf("%s → %s, want %s", tt.body, got, tt.want)
		}
	}
}
