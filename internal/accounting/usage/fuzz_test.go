package usage

import (
	"bytes"
	"github.com/swarmgate/swarmgate/internal/sse"
	"os"
	"path/filepath"
	"testing"
)

func addStreamSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*"))
	more, _ := filepath.Glob(filepath.Join("testdata", "families", "*")) // Responses and Anthropic shapes
	files = append(files, more...)
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b, uint16(len(b)/2), uint16(len(b)/3))
		}
	}
	for _, s := range []string{
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":1}}\r\n\r\n",
		"data: {\"choices\":[],\ndata: \"usage\":{}}\r\r",
		"event: error\ndata: x\n\n:c\n\ndata\n\n",
		"data: [DONE]",
	} {
		f.Add([]byte(s), uint16(3), uint16(9))
	}
}

// cut3 splits b at two fuzzer-chosen offsets.
func cut3(b []byte, x, y uint16) [][]byte {
	i, j := int(x)%(len(b)+1), int(y)%(len(b)+1)
	if i > j {
		i, j = j, i
	}
	return [][]byte{clone(b[:i]), clone(b[i:j]), clone(b[j:])}
}

// FuzzStreamParser: never panics, and chunking never changes the result.
func FuzzStreamParser(f *testing.F) {
	addStreamSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, x, y uint16) {
		var p StreamParser
		whole := runParser(&p, [][]byte{stream})
		if parts := runParser(&p, cut3(stream, x, y)); parts != whole {
			t.Fatalf("split result %+v, whole %+v", parts, whole)
		}
		if whole.delivered < 0 || whole.delivered > int64(len(stream)) {
			t.Fatalf("delivered %d of %d bytes", whole.delivered, len(stream))
		}
		_, _ = FromJSON(stream)
		if id, ok := ResponseID(stream); ok && (len(id) == 0 || len(id) > MaxResponseIDBytes || !bytes.Contains(stream, id)) {
			t.Fatalf("ResponseID %q from %q", id, stream)
		}
		if len(whole.respID) > MaxResponseIDBytes || !bytes.Contains(stream, []byte(whole.respID)) {
			t.Fatalf("stream response id %q from %q", whole.respID, stream)
		}
	})
}

// FuzzStreamFilter: never panics, chunking never changes the output, the
// output is the input minus whole events, and it is the input itself when
// nothing was removed.
func FuzzStreamFilter(f *testing.F) {
	addStreamSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, x, y uint16) {
		var fl StreamFilter
		whole, removed := runFilter(&fl, [][]byte{stream})
		parts, removed2 := runFilter(&fl, cut3(stream, x, y))
		if !bytes.Equal(parts, whole) || removed != removed2 {
			t.Fatalf("split output %q (%d removed), whole %q (%d)", parts, removed2, whole, removed)
		}
		if removed == 0 && !bytes.Equal(whole, stream) {
			t.Fatalf("nothing removed but output differs: %q", whole)
		}
		// Every usage-only event goes, by the full classification of each
		// block (the filter takes shortcuts; this does not).
		want := 0
		for _, b := range refBlocks(stream) {
			if d, has := sse.EventData(nil, b); has && len(b) <= MaxEventBytes && isUsageOnly(d) {
				want++
			}
		}
		if removed != want {
			t.Fatalf("removed %d events, want %d, from %q", removed, want, stream)
		}
		if removed > 0 {
			// What was removed is a run of whole blocks.
			var kept []byte
			n := 0
			for _, b := range refBlocks(stream) {
				if len(kept)+len(b) <= len(whole) && bytes.Equal(whole[len(kept):len(kept)+len(b)], b) {
					kept = append(kept, b...)
				} else {
					n++
				}
			}
			if !bytes.Equal(kept, whole) {
				t.Fatalf("output is not the input minus whole events:\n in %q\nout %q", stream, whole)
			}
		}
	})
}

func FuzzFromJSON(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		u, ok := FromJSON(body)
		if w, wok := fromWalk(body); ok && wok && w != u {
			t.Fatalf("tail %+v, walk %+v", u, w)
		}
	})
}

// refProbe is the byte-at-a-time probe feed uses as its specification.
func refProbe(b []byte) (pass, done bool) {
	state := 0
	for _, c := range b {
		switch {
		case state == 0:
			if c == '"' {
				state = 1
			}
		case state < len(choicesKey):
			if c == choicesKey[state] {
				state++
			} else if c == '"' {
				state = 1
			} else {
				state = 0
			}
		default:
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				continue
			}
			switch {
			case state == len(choicesKey) && c == ':':
				state++
			case state == len(choicesKey)+1 && c == '[':
				state++
			case state == len(choicesKey)+2:
				return c != ']', true
			case c == '"':
				state = 1
			default:
				state = 0
			}
		}
	}
	return false, false
}

// FuzzChoicesProbe: the probe's verdict is the byte-wise one, wherever the
// bytes are cut.
func FuzzChoicesProbe(f *testing.F) {
	for _, s := range []string{`{"choices":[]}`, `{"choices" : [ {"x":1}]}`, `""choices"choices":[1]`, `"choice"choices":[`, `{"a":"\"choices\":[1]"}`} {
		f.Add([]byte(s), uint16(3), uint16(9))
	}
	f.Fuzz(func(t *testing.T, b []byte, x, y uint16) {
		wantPass, wantDone := refProbe(b)
		for _, parts := range [][][]byte{{b}, cut3(b, x, y)} {
			var p choicesProbe
			for _, part := range parts {
				p.feed(part)
			}
			if p.pass != wantPass || p.done != wantDone {
				t.Fatalf("%q in %d parts: pass %v done %v, want %v %v", b, len(parts), p.pass, p.done, wantPass, wantDone)
			}
		}
	})
}
