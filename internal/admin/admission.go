package admin

import (
	"context"
	"net/http"
)

// admissionResponse is GET /admission. Queueing is false, with the
// reason, when admission.max_wait is 0 or this process has no queue (a
// control plane without the ext_proc role); the queue's state is still
// shown when there is one, since waiters from before a reload that set
// max_wait to 0 drain for up to their wait.
type admissionResponse struct {
	Queueing       bool    `json:"queueing"`
	Reason         string  `json:"reason,omitempty"`
	MaxWaitSeconds float64 `json:"max_wait_seconds"`
	*QueueState
}

func (s *Server) admission(w http.ResponseWriter, r *http.Request) {
	var out admissionResponse
	cfg := s.opts.Config()
	switch {
	case s.opts.Queue == nil:
		out.Reason = "no admission queue in this process"
	case cfg == nil:
		out.Reason = "no valid config loaded"
	case cfg.Admission.MaxWait.Duration <= 0:
		out.Reason = "admission.max_wait is 0"
	default:
		out.Queueing = true
	}
	if cfg != nil {
		out.MaxWaitSeconds = cfg.Admission.MaxWait.Seconds()
	}
	if s.opts.Queue != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.CheckTimeout)
		defer cancel()
		st, err := s.opts.Queue.QueueState(ctx)
		if err != nil {
			s.sourceFailed(w, "admission queue", err)
			return
		}
		// Lists, never null: the page iterates them.
		if st.Scopes == nil {
			st.Scopes = []QueueScope{}
		}
		for i := range st.Scopes {
			if st.Scopes[i].Waiters == nil {
				st.Scopes[i].Waiters = []QueueWaiters{}
			}
		}
		out.QueueState = &st
	}
	s.writeJSON(w, http.StatusOK, out)
}
