package mockupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// sseEvent is one server-sent event: an optional "event:" name (the
// Responses API and Anthropic name every event; chat completions name none)
// and its JSON data.
type sseEvent struct {
	name string
	data any
}

// writeEvents sends a 200 event stream: each event after its delay (TTFT
// before the first, InterTokenDelay between the others), flushed one by one,
// then trailer (OpenAI's "data: [DONE]"; "" for families that end with a
// named event). resetAfter >= 0 resets the connection after that many
// events instead.
func (s *Server) writeEvents(w http.ResponseWriter, r *http.Request, rec *Record, events []sseEvent, resetAfter int, trailer string) {
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Del("Content-Length")
	s.update(func() { rec.Status = http.StatusOK })
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	for i, ev := range events {
		if resetAfter >= 0 && i == resetAfter {
			s.update(func() { rec.Outcome = "reset_mid_stream" })
			abort(w)
			return
		}
		delay := s.opts.InterTokenDelay
		if i == 0 {
			delay = s.opts.TTFT
		}
		if !sleep(r.Context(), delay) {
			s.update(func() { rec.Outcome = "canceled" })
			return
		}
		b, _ := json.Marshal(ev.data)
		if i == len(events)-1 && resetAfter < 0 {
			// Final before the last bytes go out, so assertions see it.
			s.update(func() { rec.Chunks = i + 1; rec.Outcome = "ok" })
		} else {
			s.update(func() { rec.Chunks = i + 1 })
		}
		var err error
		if ev.name != "" {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, b)
		} else {
			_, err = fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if err != nil {
			s.update(func() { rec.Outcome = "canceled" })
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	if resetAfter >= 0 { // more chunks asked for than the stream has
		s.update(func() { rec.Outcome = "reset_mid_stream" })
		abort(w)
		return
	}
	if trailer != "" {
		_, _ = fmt.Fprint(w, trailer)
		if flusher != nil {
			flusher.Flush()
		}
	}
}
