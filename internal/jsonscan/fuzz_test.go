package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzStr: the block-mask string scan gives what the byte-by-byte one
// gives (raw bytes, escape flag, end, byte classes, error), at every
// alignment and with the block already classified by an earlier string.
func FuzzStr(f *testing.F) {
	for _, s := range []string{
		`abc"`, `a\"b\\"`, `\n\t\r\b\f\/"`, `\u00e9\ud83d\ude00\ud800x\udc00"`, `\u12"`, `\x"`, "a\x01\"", `a\`,
		`\\\\\\\"\\\"` + "\"", "caf\xc3\xa9 \xff\"", `\ud83d\u0041"`, `\uD83D\uDE00\u003c"`,
	} {
		for _, off := range []uint8{0, 1, 57, 62, 63} {
			f.Add([]byte(s), off, false)
			f.Add(bytes.Repeat([]byte(s[:len(s)-1]), 40), off, true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, off uint8, warm bool) {
		var body []byte
		if warm { // an earlier string in the same block loads it first
			body = append(body, `"w"`...)
		}
		body = append(body, bytes.Repeat([]byte(" "), int(off%64))...)
		pos := len(body)
		body = append(body, '"')
		body = append(body, data...)

		fast := Scanner{b: body}
		if warm {
			if _, _, err := fast.Str(nil); err != nil {
				t.Fatal(err)
			}
		}
		fast.i = pos
		var fs, ss TextStats
		fraw, fesc, ferr := fast.Str(&fs)
		slow := Scanner{b: body, i: pos}
		sraw, sesc, serr := slow.strSlow(&ss)
		if (ferr == nil) != (serr == nil) || (ferr != nil && ferr.Error() != serr.Error()) {
			t.Fatalf("%q: error %v, byte by byte %v", body, ferr, serr)
		}
		if !bytes.Equal(fraw, sraw) || fesc != sesc || fast.i != slow.i || fs != ss {
			t.Fatalf("%q:\n blocks %q %v i=%d %+v\n bytes  %q %v i=%d %+v", body, fraw, fesc, fast.i, fs, sraw, sesc, slow.i, ss)
		}
	})
}

// FuzzValid: the scanner accepts exactly what encoding/json accepts, and
// on a valid document every string it reads (keys and values, walked with
// Object and Array) decodes, with Unescape and counted with TextStats, to
// what encoding/json decodes (for valid UTF-8).
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e3,true,false,null],"b":{"c":"d\u00e9\n"}}`, `[]`, `{}`, `"\ud83d\ude00"`, `0`, `{"a":}`, `[1,]`,
		"\"\x7f\xff\"", `{"k\"ey":"v"}`, ` [ "a" , "b" ] `, `01`, `1e+`, `[[[[]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("%q: Valid %v, json.Valid %v", data, got, want)
		}
		if !json.Valid(data) {
			return
		}
		var s Scanner
		s.Reset(data)
		if err := walkStrings(t, &s); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
	})
}

// walkStrings reads one value, checking each string against encoding/json.
func walkStrings(t *testing.T, s *Scanner) error {
	check := func(raw []byte, st TextStats) {
		if !utf8.Valid(raw) { // encoding/json substitutes U+FFFD; the scanner keeps the bytes
			return
		}
		var want string
		if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &want); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		got, ok := Unescape(nil, raw)
		if !ok || !bytes.Equal(got, []byte(want)) || st.Bytes != len(want) {
			t.Fatalf("%q: Unescape %q (%d bytes counted), encoding/json %q", raw, got, st.Bytes, want)
		}
	}
	switch s.Peek() {
	case '{':
		return s.Object(func(k []byte, _ bool) error {
			check(k, TextStats{Bytes: len(mustUnescape(t, k))})
			return walkStrings(t, s)
		})
	case '[':
		return s.Array(func() error { return walkStrings(t, s) })
	case '"':
		var st TextStats
		raw, _, err := s.Str(&st)
		if err == nil {
			check(raw, st)
		}
		return err
	}
	return s.Skip()
}

func mustUnescape(t *testing.T, raw []byte) []byte {
	d, ok := Unescape(nil, raw)
	if !ok {
		t.Fatalf("%q: bad escape", raw)
	}
	return d
}
