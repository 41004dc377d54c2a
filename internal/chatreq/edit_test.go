package chatreq

import (
	"errors"
	"testing"
)

func TestSetIncludeUsage(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"absent", `{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"absent pretty", "{\n  \"model\": \"m\"\n}\n", "{\n  \"model\": \"m\",\"stream_options\":{\"include_usage\":true}\n}\n"},
		{"empty object", `{ }`, `{"stream_options":{"include_usage":true} }`},
		{"null options", `{"model":"m","stream_options":null,"x":1}`, `{"model":"m","stream_options":{"include_usage":true},"x":1}`},
		{"empty options", `{"model":"m","stream_options":{}}`, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"other option", `{"model":"m","stream_options":{"continuous_usage_stats":true}}`, `{"model":"m","stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{"false", `{"model":"m","stream_options":{"include_usage": false }}`, `{"model":"m","stream_options":{"include_usage": true }}`},
		{"null value", `{"model":"m","stream_options":{"include_usage":null}}`, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"already true", `{"model":"m","stream_options":{"include_usage":true}}`, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"nested lookalike untouched", `{"model":"m","metadata":{"stream_options":null}}`, `{"model":"m","metadata":{"stream_options":null},"stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SetIncludeUsage([]byte(tt.body))
			if err != nil {
				t.Fatalf("SetIncludeUsage: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			// The same edit from Scan's recorded positions.
			body := []byte(tt.body)
			if sr, err := Scan(body); err == nil || errors.Is(err, ErrNoModel) {
				if w := sr.WithIncludeUsage(body); string(w) != tt.want {
					t.Errorf("WithIncludeUsage = %s\nwant %s", w, tt.want)
				}
			} else {
				t.Errorf("Scan: %v", err)
			}
			r, err := Scan(got)
			if err != nil && !errors.Is(err, ErrNoModel) {
				t.Fatalf("result does not scan: %v", err)
			}
			if !r.IncludeUsage {
				t.Errorf("result has IncludeUsage false")
			}
		})
	}
	if _, err := SetIncludeUsage([]byte(`{"model":"m","stream_options":"x"}`)); err == nil {
		t.Error("string stream_options accepted")
	}
	var se *SyntaxError
	if _, err := SetIncludeUsage([]byte(`{"model":"m",`)); !errors.As(err, &se) {
		t.Errorf("truncated body: err = %v, want *SyntaxError", err)
	}
	body := []byte(`{"model":"m","stream_options":{"include_usage":true}}`)
	if got, _ := SetIncludeUsage(body); &got[0] != &body[0] {
		t.Error("unchanged body was copied")
	}
	r, _ := Scan(body)
	if got := r.WithIncludeUsage(body); &got[0] != &body[0] {
		t.Error("WithIncludeUsage copied an unchanged body")
	}
	lit := Request{Model: "m"} // not from Scan: falls back to the full edit
	if got := lit.WithIncludeUsage([]byte(`{"model":"m"}`)); string(got) != `{"model":"m","stream_options":{"include_usage":true}}` {
		t.Errorf("literal Request: %s", got)
	}
}

func TestSetModel(t *testing.T) {
	tests := []struct {
		name, body, model, want string
	}{
		{"plain", `{"model":"alias","messages":[]}`, "gpt-4o-2024-08-06", `{"model":"gpt-4o-2024-08-06","messages":[]}`},
		{"spacing kept", "{ \"messages\": [],\n \"model\" :  \"a\" }", "b", "{ \"messages\": [],\n \"model\" :  \"b\" }"},
		{"escaped", `{"model":"a"}`, "x\"y\\z\n\x01", `{"model":"x\"y\\z\n\u0001"}`},
		{"non-string replaced", `{"model":null}`, "m", `{"model":"m"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SetModel([]byte(tt.body), tt.model)
			if err != nil {
				t.Fatalf("SetModel: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if cap(got) != len(got) {
				t.Errorf("cap %d != len %d: more than one exact allocation", cap(got), len(got))
			}
			if r, err := Scan(got); err != nil || r.Model != tt.model {
				t.Errorf("Scan(result) = %q, %v", r.Model, err)
			}
		})
	}
	if _, err := SetModel([]byte(`{"x":1}`), "m"); !errors.Is(err, ErrNoModel) {
		t.Errorf("no model: err = %v", err)
	}
	if _, err := SetModel([]byte(`{"model":"a","model":"b"}`), "m"); !errors.Is(err, ErrDuplicateModel) {
		t.Errorf("duplicate model: err = %v", err)
	}
}

func TestAppendIncludeUsageReusesBuffer(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	r, err := Scan(body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`
	buf := r.AppendIncludeUsage(nil, body)
	if string(buf) != want {
		t.Fatalf("got %s", buf)
	}
	if a := testing.AllocsPerRun(20, func() { buf = r.AppendIncludeUsage(buf[:0], body) }); a != 0 {
		t.Errorf("%v allocations with a buffer large enough, want 0", a)
	}
	if string(buf) != want {
		t.Fatalf("reused: got %s", buf)
	}
	// Already true: the body itself is appended, unchanged.
	on := []byte(`{"model":"m","stream_options":{"include_usage":true}}`)
	ro, _ := Scan(on)
	if got := ro.AppendIncludeUsage([]byte("x"), on); string(got) != "x"+string(on) {
		t.Errorf("unchanged body: got %s", got)
	}
}
