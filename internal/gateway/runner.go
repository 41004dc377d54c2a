package gateway

import (
	"context"
	"errors"
	"net"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
)

// A runner is one role of the process (or a part of one), built and its
// listener bound before it runs. Run serves until ctx ends and returns
// once the role has stopped, drained where it drains.
type runner interface {
	Run(ctx context.Context) error
}

// group runs each runner as soon as it is built, in one errgroup: the first
// to fail stops the others. What outlives the runners (client connections
// they dial through) is closed after every runner has returned, last first.
type group struct {
	grp     *errgroup.Group
	ctx     context.Context
	cancel  context.CancelFunc
	closers []func() error
}

func newGroup(ctx context.Context) *group {
	runCtx, cancel := context.WithCancel(ctx)
	grp, gctx := errgroup.WithContext(runCtx)
	return &group{grp: grp, ctx: gctx, cancel: cancel}
}

func (s *group) start(r runner) { s.grp.Go(func() error { return r.Run(s.ctx) }) }

// closeAfter registers f to run once every runner has returned.
func (s *group) closeAfter(f func() error) { s.closers = append(s.closers, f) }

// abort stops what already started when a later role fails to build, and
// waits for it, so nothing keeps running on a closed Redis client.
func (s *group) abort(err error) error {
	s.cancel()
	_ = s.grp.Wait()
	return err
}

// wait returns when every runner has stopped; a shutdown is no error.
func (s *group) wait() error {
	err := s.grp.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// close runs the registered closers, last first, then cancels the group.
func (s *group) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
	s.cancel()
}

// whenReady closes done once every channel in ready is closed, unless the
// process stops first.
func (s *group) whenReady(done chan<- struct{}, ready []<-chan struct{}) {
	s.grp.Go(func() error {
		for _, r := range ready {
			select {
			case <-r:
			case <-s.ctx.Done():
				return nil
			}
		}
		close(done)
		return nil
	})
}

// bind opens addr, the config's field, unless the caller passed a
// listener; a taken port names the field that moves it.
func bind(pre net.Listener, addr, field string) (net.Listener, error) {
	if pre != nil {
		return pre, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, config.ListenError(field, addr, err)
	}
	return lis, nil
}

// serveGRPC serves until ctx ends, then drains the streams in flight for
// up to 10 s before cutting them.
func serveGRPC(ctx context.Context, gs *grpc.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			gs.Stop()
		}
		return nil
	}
}
