package jsonscan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` [ ] `, `"a\u00e9\ud83d\ude00"`, `-0.5e+3`, `0`, `true`, `null`, `{"a":[1,{"b":null}],"c":"\\\""}`,
		``, ` `, `{`, `{"a"}`, `{"a":}`, `[1,]`, `01`, `1.`, `1e`, `-`, `tru`, `"a`, "\"\x01\"", `"\x"`, `"\u12g4"`,
		`{"a":1}x`, `[1 2]`, `{"a":1,}`, `{1:2}`, strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	} {
		if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
			t.Errorf("Valid(%.40q) = %v, json.Valid %v", doc, got, want)
		}
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	for _, tt := range []struct {
		doc            string
		off, line, col int
		msgContains    string
	}{
		{"{\n \"a\": x}", 8, 2, 7, "invalid character 'x'"},
		{`[1,2`, 4, 1, 5, "unexpected end"},
		{`{"a" 1}`, 5, 1, 6, "':' after object key"},
		{"\"a\x01\"", 2, 1, 3, "control character"},
		{`1 2`, 2, 1, 3, "after top-level value"},
	} {
		var s Scanner
		s.Reset([]byte(tt.doc))
		err := s.Skip()
		if err == nil {
			err = s.Trailing()
		}
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset != tt.off || se.Line != tt.line || se.Col != tt.col || !strings.Contains(se.Msg, tt.msgContains) {
			t.Errorf("%q: %v, want offset %d line %d col %d %q", tt.doc, err, tt.off, tt.line, tt.col, tt.msgContains)
		}
	}
}

func TestNumber(t *testing.T) {
	for _, tt := range []struct {
		doc     string
		raw     string
		integer bool
		ok      bool
	}{
		{"12,", "12", true, true}, {"-0]", "-0", true, true}, {"1.5e-3}", "1.5e-3", false, true},
		{"2E8", "2E8", false, true}, {"-x", "", false, false}, {"1.e", "", false, false},
	} {
		var s Scanner
		s.Reset([]byte(tt.doc))
		raw, integer, err := s.Number()
		if string(raw) != tt.raw || integer != tt.integer || (err == nil) != tt.ok {
			t.Errorf("%q: %q %v %v", tt.doc, raw, integer, err)
		}
	}
}

func TestObjectAndArray(t *testing.T) {
	doc := []byte(` {"a" : [1, "x", {"b":true}], "\u0063":null, "d":{}} `)
	var s Scanner
	s.Reset(doc)
	var keys []string
	var elems []string
	err := s.Object(func(k []byte, esc bool) error {
		var buf [MaxKey]byte
		keys = append(keys, string(DecodeKey(&buf, k)))
		if KeyIs(k, esc, "a") {
			return s.Array(func() error {
				v, err := s.Value()
				elems = append(elems, string(v))
				return err
			})
		}
		return s.Skip()
	})
	if err != nil || s.Trailing() != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(keys, []string{"a", "c", "d"}) || !reflect.DeepEqual(elems, []string{"1", `"x"`, `{"b":true}`}) {
		t.Errorf("keys %q elems %q", keys, elems)
	}
	s.Reset([]byte(`[1,2]`))
	if err := s.Object(func([]byte, bool) error { return nil }); err == nil {
		t.Error("Object accepted an array")
	}
}

func TestIter(t *testing.T) {
	for _, tt := range []struct {
		doc   string
		items []string // key=value or value
		whole bool
	}{
		{`{"a":1,"b":[2,3], "c" : "x"}`, []string{"a=1", "b=[2,3]", `c="x"`}, true},
		{` { } `, nil, true},
		{`[1, {"a":2}, "s"]`, []string{"1", `{"a":2}`, `"s"`}, true},
		{`[]`, nil, true},
		{`{"a":1} x`, []string{"a=1"}, false},
		{`{"a":1,"b":tru}`, []string{"a=1"}, false},
		{`{"a":1,}`, []string{"a=1"}, false},
		{`[1 2]`, []string{"1"}, false},
		{`"s"`, nil, false},
	} {
		var it Iter
		it.Reset([]byte(tt.doc))
		var got []string
		if strings.HasPrefix(strings.TrimSpace(tt.doc), "[") {
			for v, ok := it.Elem(); ok; v, ok = it.Elem() {
				got = append(got, string(v))
			}
		} else {
			for k, _, v, ok := it.Member(); ok; k, _, v, ok = it.Member() {
				got = append(got, string(k)+"="+string(v))
			}
		}
		if !reflect.DeepEqual(got, tt.items) || it.Whole() != tt.whole || (it.Err() == nil) != (tt.whole || tt.doc == `{"a":1} x`) {
			t.Errorf("%q: %q whole %v err %v", tt.doc, got, it.Whole(), it.Err())
		}
	}
}

func TestUnescape(t *testing.T) {
	for _, raw := range []string{`plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `\u00e9\u4e2d`, `\ud83d\ude00`, `\ud800x`, `\udc00`, `\ud83d\u0041`} {
		got, ok := Unescape(nil, []byte(raw))
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil || !ok || string(got) != want {
			t.Errorf("%q: %q %v, encoding/json %q %v", raw, got, ok, want, err)
		}
	}
	if _, ok := Unescape(nil, []byte(`\x`)); ok {
		t.Error(`\x accepted`)
	}
}

func TestObjects(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`[{"a":1},2,{"b":"x","a":3},null]`, "a=1 b a=3"},
		{`[]`, ""},
		{`{"a":1}`, ""}, // not an array: skipped
		{`"s"`, ""},
	} {
		var s Scanner
		s.Reset([]byte(tt.doc))
		var got []string
		err := s.Objects(func(k []byte, _ bool) error {
			if string(k) == "a" {
				v, err := s.Value()
				got = append(got, "a="+string(v))
				return err
			}
			got = append(got, string(k))
			return s.Skip()
		})
		if err != nil || s.Trailing() != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("%s: %q %v", tt.doc, got, err)
		}
	}
}
