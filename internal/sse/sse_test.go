package sse

import (
	"strings"
	"testing"
)

func TestEventsAtEveryChunkSize(t *testing.T) {
	big := strings.Repeat("x", MaxEventBytes)
	for _, tt := range []struct {
		name, stream string
		drop         bool
		want         string
		dropped      int
	}{
		{"framing", "event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\n\ndata: one\ndata: two\n\nevent: b\rdata: last", false,
			`a|{"x":1};|one` + "\n" + `two;b|last`, 0},
		{"field without colon, no space", "data\n\ndata:x\n\nid: 7\nretry: 1\ndata:  y\n\n", false, "|;|x;| y", 0},
		{"event without data", "event: e\n\ndata: d\n\n", false, "|d", 0},
		{"large event dropped", "data: " + big + "\ndata: more\n\nevent: error\ndata: after\n\n", true, "error|after", 1},
		{"large partial line dropped", "data: a\n" + "data: " + big + big[:10] + "\n\ndata: b\n\n", true, "|b", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sizes := []int{len(tt.stream), 1, 2, 3, 7, 64}
			if len(tt.stream) > 1<<16 {
				sizes = []int{len(tt.stream), 4096, 1000}
			}
			for _, size := range sizes {
				p := Events{DropLarge: tt.drop}
				var got []string
				fn := func(e Event) error { got = append(got, string(e.Name)+"|"+string(e.Data)); return nil }
				for i := 0; i < len(tt.stream); i += size {
					j := min(i+size, len(tt.stream))
					if err := p.Feed([]byte(tt.stream[i:j]), j == len(tt.stream), fn); err != nil {
						t.Fatal(err)
					}
					if p.Held() > 3*MaxEventBytes {
						t.Fatalf("chunks of %d: holds %d bytes", size, p.Held())
					}
				}
				if g := strings.Join(got, ";"); g != tt.want || p.Dropped() != tt.dropped {
					t.Fatalf("chunks of %d: got %q (dropped %d), want %q (%d)", size, g, p.Dropped(), tt.want, tt.dropped)
				}
			}
		})
	}
}

func TestEventTooLargeFails(t *testing.T) {
	for _, stream := range []string{"data: " + strings.Repeat("x", MaxEventBytes+1), "data: " + strings.Repeat("x", MaxEventBytes+1) + "\n\n"} {
		var p Events
		if err := p.Feed([]byte(stream), false, func(Event) error { return nil }); err != ErrEventTooLarge {
			t.Fatalf("got %v, want ErrEventTooLarge", err)
		}
	}
}

func TestFraming(t *testing.T) {
	for _, tt := range []struct {
		in   string
		term int
	}{{"abc", -1}, {"a\nb", 1}, {"a\rb\n", 1}, {"ab\n\r", 2}, {"\r\n", 0}} {
		if got := NextTerminator([]byte(tt.in)); got != tt.term {
			t.Errorf("NextTerminator(%q) = %d, want %d", tt.in, got, tt.term)
		}
	}
	for _, tt := range []struct{ line, field, value string }{
		{"data: x", "data", "x"}, {"data:x", "data", "x"}, {"data:  x", "data", " x"}, {"data", "data", ""}, {": c", "", "c"},
	} {
		if f, v := SplitField([]byte(tt.line)); string(f) != tt.field || string(v) != tt.value {
			t.Errorf("SplitField(%q) = %q %q", tt.line, f, v)
		}
	}
	for _, tt := range []struct {
		block, data string
		has         bool
	}{
		{"data: a\r\ndata: b\r\n\r\n", "a\nb", true}, {"event: x\n: c\n\n", "", false}, {"data\n\n", "", true},
	} {
		if d, has := EventData(nil, []byte(tt.block)); string(d) != tt.data || has != tt.has {
			t.Errorf("EventData(%q) = %q %v", tt.block, d, has)
		}
	}
	if got := string(AppendEvent(nil, "message_stop", []byte(`{}`))); got != "event: message_stop\ndata: {}\n\n" {
		t.Errorf("AppendEvent = %q", got)
	}
}

// An event over the cap, with KeepEnds, comes out Cut with its data's
// first HeadBytes and last TailBytes, whatever the chunking, and the
// events around it are untouched.
func TestEventsKeepEnds(t *testing.T) {
	big := strings.Repeat("0123456789", MaxEventBytes/10+7)
	for _, tt := range []struct {
		name, stream string
		data         string // the cut event's whole data
		want         string // the events dispatched, the cut one as "cut"
		cuts         int
	}{
		{"one long line", "data: before\n\nevent: response.completed\ndata: {" + big + "}\n\ndata: after\n\n",
			"{" + big + "}", "|before;response.completed|cut;|after", 1},
		{"lines around a long one", "data: a\ndata: " + big + "\r\ndata: z\r\n\r\n", "a\n" + big + "\nz", "|cut", 1},
		{"many lines past the cap", "data: a\n" + strings.Repeat("data: "+big[:1000]+"\n", 1100) + "\ndata: b\n\n",
			"a" + strings.Repeat("\n"+big[:1000], 1100), "|cut;|b", 1},
		{"a long comment is skipped", "data: " + big + "\n: " + big + "\ndata: z\n\ndata: b\n\n", big + "\nz", "|cut;|b", 1},
		{"cut at the stream's end", "data: " + big, big, "|cut", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{len(tt.stream), 65537, 4096, 1000} {
				p := Events{DropLarge: true, KeepEnds: true}
				var got []string
				fn := func(e Event) error {
					if !e.Cut {
						got = append(got, string(e.Name)+"|"+string(e.Data))
						return nil
					}
					got = append(got, string(e.Name)+"|cut")
					head, tail := tt.data[:HeadBytes], tt.data[len(tt.data)-TailBytes:]
					if string(e.Data) != head || string(e.Tail) != tail {
						t.Errorf("chunks of %d: cut event's ends differ (head %d bytes, tail %d bytes)", size, len(e.Data), len(e.Tail))
					}
					return nil
				}
				for i := 0; i < len(tt.stream); i += size {
					j := min(i+size, len(tt.stream))
					if err := p.Feed([]byte(tt.stream[i:j]), j == len(tt.stream), fn); err != nil {
						t.Fatal(err)
					}
					if p.Held() > 3*MaxEventBytes {
						t.Fatalf("chunks of %d: holds %d bytes", size, p.Held())
					}
				}
				if g := strings.Join(got, ";"); g != tt.want || p.Cuts() != tt.cuts {
					t.Fatalf("chunks of %d: got %q (cuts %d), want %q (%d)", size, g, p.Cuts(), tt.want, tt.cuts)
				}
			}
		})
	}
}

// TestEventsKeepEndsFieldSplit: a chunk boundary inside the field name of
// the line that takes an event over the cap does not decide the field
// before its ':' arrives (a data line split after "da" was dropped whole,
// an event line's name lost), and a huge chunk is not buffered whole.
func TestEventsKeepEndsFieldSplit(t *testing.T) {
	first := strings.Repeat("a", MaxEventBytes-1) // "da" takes the event over the cap
	second := strings.Repeat("b", 3*MaxEventBytes) + "z"
	for _, tt := range []struct {
		name   string
		chunks []string
		wantFn func(t *testing.T, got []Event)
	}{
		{"data split after da", []string{"data: " + first + "\nda", "ta: " + second[:3*MaxEventBytes], second[3*MaxEventBytes:] + "\n\n"},
			func(t *testing.T, got []Event) {
				data := first + "\n" + second
				if len(got) != 1 || !got[0].Cut || string(got[0].Data) != data[:HeadBytes] || string(got[0].Tail) != data[len(data)-TailBytes:] {
					t.Fatalf("got %d events (cut %v); want one cut event with the joined data's ends", len(got), len(got) > 0 && got[0].Cut)
				}
			}},
		{"event name split after ev", []string{"data: " + first + "\nev", "ent: response.completed\ndata: " + second + "\n\n"},
			func(t *testing.T, got []Event) {
				if len(got) != 1 || !got[0].Cut || string(got[0].Name) != "response.completed" {
					t.Fatalf("got %d events; want one cut event named response.completed", len(got))
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Events{DropLarge: true, KeepEnds: true}
			var got []Event
			for i, c := range tt.chunks {
				err := p.Feed([]byte(c), i == len(tt.chunks)-1, func(e Event) error {
					got = append(got, Event{Name: []byte(string(e.Name)), Data: []byte(string(e.Data)), Tail: []byte(string(e.Tail)), Cut: e.Cut})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if p.Held() > 3*MaxEventBytes {
					t.Fatalf("after chunk %d (%d bytes): holds %d bytes", i, len(c), p.Held())
				}
			}
			tt.wantFn(t, got)
		})
	}
}
