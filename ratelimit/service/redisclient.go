package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	rlredis "github.com/envoyproxy/ratelimit/src/redis"
	"github.com/mediocregopher/radix/v4"
	"github.com/redis/go-redis/v9"
)

// redisClient implements envoyproxy/ratelimit's redis.Client on go-redis, so
// the library's fixed-window algorithm (pipelined INCRBY + EXPIRE) runs
// unchanged on the client swarmgate builds from config.Redis.
//
// Why not the library's own radix driver: it PINGs at construction and
// panics when Redis is down, and every command runs with
// context.Background() on a pool that blocks while no connection is
// available (src/redis/driver_impl.go), so a Redis outage parks one
// goroutine per request until Redis returns, and those parked requests then
// all INCRBY at once. Here every pipeline is bounded by opTimeout.
type redisClient struct {
	rdb       redis.UniversalClient
	opTimeout time.Duration
	onError   func()
}

// pipeCmd carries one command through the library's Pipeline type, whose
// element holds a radix.Action. It is never performed by radix.
type pipeCmd struct {
	rcv  any
	args []any // command name, key, arguments
}

func (c *pipeCmd) Properties() radix.ActionProperties {
	return radix.ActionProperties{Keys: []string{c.args[1].(string)}, CanPipeline: true}
}

func (c *pipeCmd) Perform(context.Context, radix.Conn) error {
	return errors.New("swarmgate: redis command is executed by go-redis, not radix")
}

func newPipeCmd(rcv any, cmd, key string, args []any) *pipeCmd {
	all := make([]any, 0, 2+len(args))
	all = append(all, cmd, key)
	all = append(all, args...)
	return &pipeCmd{rcv: rcv, args: all}
}

func (c *redisClient) DoCmd(rcv any, cmd, key string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	defer cancel()
	pc := newPipeCmd(rcv, cmd, key, args)
	r := c.rdb.Do(ctx, pc.args...)
	return c.fail(assign(pc.rcv, r))
}

func (c *redisClient) PipeAppend(p rlredis.Pipeline, rcv any, cmd, key string, args ...any) rlredis.Pipeline {
	return append(p, rlredis.PipelineAction{Action: newPipeCmd(rcv, cmd, key, args), Key: key})
}

func (c *redisClient) PipeDo(p rlredis.Pipeline) error {
	if len(p) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(p))
	for i, a := range p {
		pc, ok := a.Action.(*pipeCmd)
		if !ok {
			return fmt.Errorf("redis pipeline: foreign action %T", a.Action)
		}
		cmds[i] = pipe.Do(ctx, pc.args...)
	}
	// Exec's own error is the first failed command's; assign each below.
	_, _ = pipe.Exec(ctx)
	for i, a := range p {
		if err := assign(a.Action.(*pipeCmd).rcv, cmds[i]); err != nil {
			return c.fail(err)
		}
	}
	return nil
}

func (c *redisClient) fail(err error) error {
	if err != nil && c.onError != nil {
		c.onError()
	}
	return err
}

// assign stores a reply in the receiver the library passed (*uint64 for
// INCRBY and GET, nil for EXPIRE). A missing key (GET) leaves it at zero.
func assign(rcv any, r *redis.Cmd) error {
	err := r.Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis %v: %w", r.Args()[0], err)
	}
	switch p := rcv.(type) {
	case nil:
		return nil
	case *uint64:
		n, err := r.Uint64()
		if err != nil {
			return fmt.Errorf("redis %v reply: %w", r.Args()[0], err)
		}
		*p = n
	case *int64:
		n, err := r.Int64()
		if err != nil {
			return fmt.Errorf("redis %v reply: %w", r.Args()[0], err)
		}
		*p = n
	case *string:
		s, err := r.Text()
		if err != nil {
			return fmt.Errorf("redis %v reply: %w", r.Args()[0], err)
		}
		*p = s
	default:
		return fmt.Errorf("redis %v: unsupported receiver %T", r.Args()[0], rcv)
	}
	return nil
}

func (c *redisClient) Close() error { return nil } // the owner closes rdb

func (c *redisClient) NumActiveConns() int {
	if s := c.rdb.PoolStats(); s != nil {
		return int(s.TotalConns - s.IdleConns)
	}
	return 0
}
