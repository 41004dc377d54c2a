package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

type runFunc func(ctx context.Context) error

func (f runFunc) Run(ctx context.Context) error { return f(ctx) }

// recorder notes, in order, when each runner stops and each closer runs.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }

// untilDone is a runner that serves until ctx ends.
func (r *recorder) untilDone(name string) runner {
	return runFunc(func(ctx context.Context) error { <-ctx.Done(); r.add("stopped " + name); return ctx.Err() })
}

func TestGroup(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		stop    func(s *group, cancel context.CancelFunc) error // how the run ends
		failing bool                                            // a third runner fails at once
		wantErr error
	}{
		{"shutdown is no error", func(s *group, cancel context.CancelFunc) error { cancel(); return s.wait() }, false, nil},
		{"a failing runner stops the others", func(s *group, _ context.CancelFunc) error { return s.wait() }, true, boom},
		{"a role that fails to build stops those started", func(s *group, _ context.CancelFunc) error { return s.abort(boom) }, false, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var r recorder
			s := newGroup(ctx)
			s.start(r.untilDone("a"))
			s.closeAfter(func() error { r.add("closed a's connection"); return nil })
			s.start(r.untilDone("b"))
			s.closeAfter(func() error { r.add("closed b's connection"); return nil })
			if tc.failing {
				s.start(runFunc(func(context.Context) error { return boom }))
			}
			done := make(chan error, 1)
			go func() { done <- tc.stop(s, cancel) }()
			select {
			case err := <-done:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the runners did not stop")
			}
			s.close()
			stopped := r.events[:2]
			slices.Sort(stopped)
			if want := []string{"stopped a", "stopped b", "closed b's connection", "closed a's connection"}; !slices.Equal(r.events, want) {
				t.Errorf("events %q, want %q (runners first, then closers last first)", r.events, want)
			}
			if s.ctx.Err() == nil {
				t.Error("the group's context is still live after close")
			}
		})
	}
}

func TestWhenReady(t *testing.T) {
	for _, tc := range []struct {
		name      string
		channels  int
		closeAll  bool
		wantReady bool
	}{
		{"no channel: ready at once", 0, false, true},
		{"every channel closed", 2, true, true},
		{"one still open: not ready", 2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newGroup(context.Background())
			var ready []<-chan struct{}
			for i := 0; i < tc.channels; i++ {
				c := make(chan struct{})
				if tc.closeAll || i == 0 {
					close(c)
				}
				ready = append(ready, c)
			}
			done := make(chan struct{})
			s.whenReady(done, ready)
			select {
			case <-done:
				if !tc.wantReady {
					t.Error("ready before every channel closed")
				}
			case <-time.After(200 * time.Millisecond):
				if tc.wantReady {
					t.Error("not ready")
				}
			}
			s.cancel()
			if err := s.wait(); err != nil {
				t.Errorf("wait: %v", err)
			}
		})
	}
}
