package chatreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func addSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "estimate", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi\n\u00e9"}]}`,
		`{"model":"m","stream_options":null}`,
		`{"model":"m","prompt":[[1,2],[3]],"input":["a","b"],"max_tokens":5}`,
		`{"model":"a","mod\u0065l":"b"}`,
		`{}`, `[]`, `"x"`, `{"model":1}`, `{"model":"m",}`, "{\"model\":\"\xff\xfe\"}",
	} {
		f.Add([]byte(s))
	}
}

// FuzzScan: Scan never panics, accepts exactly what encoding/json accepts,
// and agrees with it on the fields it reads.
func FuzzScan(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Scan(body)
		var se *SyntaxError
		isSyntax := errors.As(err, &se)
		if valid := json.Valid(body); valid == isSyntax {
			t.Fatalf("json.Valid = %v but Scan error = %v", valid, err)
		}
		if isSyntax {
			if se.Offset < 0 || se.Offset > len(body) || se.Line < 1 || se.Col < 1 {
				t.Fatalf("bad position %+v", se)
			}
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			if err != ErrNotObject {
				t.Fatalf("non-object accepted: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		var model string
		if json.Unmarshal(m["model"], &model) != nil || model != r.Model {
			t.Fatalf("model %q, encoding/json %s", r.Model, m["model"])
		}
		var stream bool
		_ = json.Unmarshal(m["stream"], &stream)
		if stream != r.Stream {
			t.Fatalf("stream %v, encoding/json %s", r.Stream, m["stream"])
		}
		if r.PromptBytes < 0 || r.PromptNonASCIIBytes+r.PromptSymbolBytes > r.PromptBytes || r.EstimatePromptTokens(0) < 0 {
			t.Fatalf("bad counts %+v", r)
		}
	})
}

// FuzzSetIncludeUsage: the result is valid JSON equal to the input with
// stream_options.include_usage set to true and nothing else changed, and
// the edit from Scan's recorded positions is the same.
func FuzzSetIncludeUsage(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := SetIncludeUsage(body)
		if r, serr := Scan(body); serr == nil {
			if err != nil {
				t.Fatalf("Scan accepted %q, SetIncludeUsage: %v", body, err)
			}
			if w := r.WithIncludeUsage(body); !bytes.Equal(w, out) {
				t.Fatalf("WithIncludeUsage(%q) = %q, SetIncludeUsage %q", body, w, out)
			}
			prefix := []byte("kept:")
			if w := r.AppendIncludeUsage(prefix, body); !bytes.Equal(w, append(prefix, out...)) {
				t.Fatalf("AppendIncludeUsage(%q, %q) = %q, want the prefix and %q", prefix, body, w, out)
			}
		}
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid output %q", out)
		}
		var in, got map[string]any
		if json.Unmarshal(body, &in) != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("not objects: %q -> %q", body, out)
		}
		so, ok := got["stream_options"].(map[string]any)
		if !ok || so["include_usage"] != true {
			t.Fatalf("stream_options = %v", got["stream_options"])
		}
		inSO, _ := in["stream_options"].(map[string]any)
		delete(so, "include_usage")
		delete(inSO, "include_usage")
		if len(so) != len(inSO) {
			t.Fatalf("stream_options members changed: %v -> %v", inSO, so)
		}
		delete(in, "stream_options")
		delete(got, "stream_options")
		a, _ := json.Marshal(in)
		b, _ := json.Marshal(got)
		if !bytes.Equal(a, b) {
			t.Fatalf("other members changed:\n%s\n%s", a, b)
		}
		// Idempotent, without a copy.
		again, err := SetIncludeUsage(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second SetIncludeUsage: %v %q", err, again)
		}
	})
}

func FuzzSetModel(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := SetModel(body, "new\"model\n")
		if err != nil {
			return
		}
		r, err := Scan(out)
		if !json.Valid(out) || (err != nil && !errors.As(err, new(*FieldError))) || (err == nil && r.Model != "new\"model\n") {
			t.Fatalf("SetModel output %q: %+v %v", out, r, err)
		}
	})
}
