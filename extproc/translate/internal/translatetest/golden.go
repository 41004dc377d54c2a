// Package translatetest runs a translator through its golden files; the
// pair packages' tests share it.
package translatetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

var update = flag.Bool("update", false, "rewrite the golden *.out.* files from the translators' output")

// caseOptions is a golden case's options.json (all optional).
type caseOptions struct {
	Model            string `json:"model"`              // translate.RequestOptions.Model; default "upstream-model"
	DefaultMaxTokens int    `json:"default_max_tokens"` // translate.RequestOptions.DefaultMaxTokens; default 4096
	Status           int    `json:"status"`             // translate.ResponseOptions.Status; default 200
	IncludeUsage     bool   `json:"include_usage"`
	RequestID        string `json:"request_id"` // default "sg-golden"
	Created          int64  `json:"created"`    // default 1764806400
	// EchoRequest hands request.in.json to the answer as
	// translate.ResponseOptions.Request (the router-level filter keeps it for the
	// Responses API).
	EchoRequest bool `json:"echo_request"`
	// HostedTools "drop" translates with translate.DropHosted (default: refuse);
	// the dropped tool types go to request.dropped, one a line.
	HostedTools string `json:"hosted_tools"`
}

// RunGoldens reviews a translator through its golden files, one directory
// per case under testdata/<From>_to_<To>/:
//
//	request.in.json  → request.out.json, or request.err (the translate.Unsupported's
//	                   param on the first line) when it must be refused
//	response.in.json → response.out.json   (a JSON answer)
//	response.in.sse  → response.out.sse    (a stream)
//	options.json     → caseOptions
//	request.dropped  ← the hosted tools dropped (hosted_tools: drop)
//
// A stream must translate to the same bytes however it is chunked.
// go test ./extproc/translate/<pair> -run Golden -update rewrites the outputs;
// review the diff like code.
func RunGoldens(t *testing.T, tr *translate.Translator) {
	t.Helper()
	if tr == nil {
		t.Fatal("translator not registered")
	}
	dir := filepath.Join("testdata", tr.From+"_to_"+tr.To)
	cases, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("no golden cases in %s", dir)
	}
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			cdir := filepath.Join(dir, c.Name())
			o := caseOptions{Model: "upstream-model", DefaultMaxTokens: 4096, Status: 200, RequestID: "sg-golden", Created: 1764806400}
			if b, err := os.ReadFile(filepath.Join(cdir, "options.json")); err == nil {
				if err := json.Unmarshal(b, &o); err != nil {
					t.Fatalf("options.json: %v", err)
				}
			}
			ran := false
			if in, err := os.ReadFile(filepath.Join(cdir, "request.in.json")); err == nil {
				ran = true
				ro := translate.RequestOptions{Model: o.Model, DefaultMaxTokens: o.DefaultMaxTokens}
				var dropped []byte
				if o.HostedTools == "drop" {
					ro.Hosted = translate.DropHosted
					ro.Dropped = func(t string) { dropped = append(append(dropped, t...), '\n') }
				}
				out, err := tr.Request(in, ro)
				var un *translate.Unsupported
				switch {
				case errors.As(err, &un):
					compareGolden(t, filepath.Join(cdir, "request.err"), []byte(un.Param+"\n"+un.Message+"\n"))
				case err != nil:
					t.Fatalf("request: %v", err)
				default:
					compareGolden(t, filepath.Join(cdir, "request.out.json"), indent(t, out))
				}
				if o.HostedTools == "drop" {
					compareGolden(t, filepath.Join(cdir, "request.dropped"), dropped)
				}
			}
			for _, kind := range []string{"json", "sse"} {
				in, err := os.ReadFile(filepath.Join(cdir, "response.in."+kind))
				if err != nil {
					continue
				}
				ran = true
				ro := translate.ResponseOptions{Status: o.Status, Stream: kind == "sse", IncludeUsage: o.IncludeUsage, RequestID: o.RequestID, Created: o.Created}
				if o.EchoRequest {
					ro.Request, _ = os.ReadFile(filepath.Join(cdir, "request.in.json"))
				}
				whole := TranslateChunked(t, tr, ro, in, len(in))
				for _, size := range []int{1, 7, 64} {
					if got := TranslateChunked(t, tr, ro, in, size); !bytes.Equal(got, whole) {
						t.Fatalf("chunks of %d bytes translate differently:\n%s\nwhole:\n%s", size, got, whole)
					}
				}
				if kind == "json" && o.Status < 400 {
					whole = indent(t, whole)
				}
				compareGolden(t, filepath.Join(cdir, "response.out."+kind), whole)
			}
			if !ran {
				t.Fatal("case has no request.in.json or response.in.*")
			}
		})
	}
}

// TranslateChunked feeds in to a new Response of tr in chunks of size
// bytes and returns what the client gets.
func TranslateChunked(t *testing.T, tr *translate.Translator, o translate.ResponseOptions, in []byte, size int) []byte {
	t.Helper()
	r := tr.NewResponse(o)
	var out []byte
	for i := 0; i < len(in); i += size {
		j := min(i+size, len(in))
		var err error
		if out, err = r.Write(out, in[i:j], j == len(in)); err != nil {
			t.Fatalf("response: %v", err)
		}
	}
	if len(in) == 0 {
		var err error
		if out, err = r.Write(out, nil, true); err != nil {
			t.Fatalf("response: %v", err)
		}
	}
	return out
}

// indent makes a JSON body reviewable; it fails the test if the body is
// not JSON.
func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it, then review it)", err)
	}
	if !bytes.Equal(bytes.TrimSpace(want), bytes.TrimSpace(got)) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
