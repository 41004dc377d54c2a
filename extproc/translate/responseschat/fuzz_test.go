package responseschat

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

// fuzzSeeds adds every golden case's file of that name to the
// corpus.
func fuzzSeeds(f *testing.F, name string, add func([]byte)) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "responses_to_chat_completions", "*", name))
	if len(paths) == 0 {
		f.Fatalf("no %s seeds", name)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		add(b)
	}
}

func FuzzResponsesChatRequest(f *testing.F) {
	tr := New()
	fuzzSeeds(f, "request.in.json", func(b []byte) { f.Add(b) })
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := tr.Request(body, translate.RequestOptions{Model: "m"})
		if err != nil {
			var un *translate.Unsupported
			if errors.As(err, &un) && un.Param == "" && json.Valid(body) {
				t.Fatalf("a refusal names no field: %v", err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("not JSON:\n%s\nfrom\n%s", out, body)
		}
	})
}

func FuzzResponsesChatResponseSSE(f *testing.F) {
	tr := New()
	fuzzSeeds(f, "response.in.sse", func(b []byte) { f.Add(b, uint8(7)) })
	f.Fuzz(func(t *testing.T, in []byte, size uint8) {
		o := translate.ResponseOptions{Status: 200, Stream: true, RequestID: "sg-fuzz", Created: 1}
		whole, werr := feedChunks(tr, o, in, len(in))
		chunked, cerr := feedChunks(tr, o, in, int(size)+1)
		if (werr == nil) != (cerr == nil) || !bytes.Equal(whole, chunked) {
			t.Fatalf("chunks of %d translate differently (%v, %v):\n%s\nwhole:\n%s", int(size)+1, cerr, werr, chunked, whole)
		}
		// Every event the client gets is named for its JSON's type.
		var p translate.Events
		n := 0
		err := p.Feed(whole, true, func(e translate.Event) error {
			n++
			var v struct {
				Type string `json:"type"`
				Seq  *int   `json:"sequence_number"`
			}
			if err := json.Unmarshal(e.Data, &v); err != nil {
				return err
			}
			if v.Type != string(e.Name) || v.Seq == nil || *v.Seq != n-1 {
				return errors.New("event " + string(e.Name) + " has type " + v.Type + " or a wrong sequence_number")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v:\n%s", err, whole)
		}
		if werr == nil && n < 3 {
			t.Fatalf("a finished stream has %d events:\n%s", n, whole)
		}
		// The fast path reads what encoding/json reads.
		slow := newStream(o)
		slow.noScan = true
		decoded, serr := slow.Write(nil, in, true)
		if werr == nil && serr == nil && !reflect.DeepEqual(decodeEvents(t, whole), decodeEvents(t, decoded)) {
			t.Fatalf("the fast path translates differently:\n%s\nencoding/json:\n%s", whole, decoded)
		}
	})
}

func feedChunks(tr *translate.Translator, o translate.ResponseOptions, in []byte, size int) ([]byte, error) {
	r := tr.NewResponse(o)
	var out []byte
	if len(in) == 0 {
		return r.Write(out, nil, true)
	}
	for i := 0; i < len(in); i += size {
		j := min(i+size, len(in))
		var err error
		if out, err = r.Write(out, in[i:j], j == len(in)); err != nil {
			return out, err
		}
	}
	return out, nil
}
