package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Redis metric names.
const (
	MetricRedisCommands = "swarmgate_redis_commands_total"
	MetricRedisErrors   = "swarmgate_redis_errors_total"
)

// Kinds of Redis error (the "kind" label).
const (
	RedisErrDial    = "dial"    // could not connect
	RedisErrTimeout = "timeout" // deadline or network timeout
	RedisErrNetwork = "network" // connection broken
	RedisErrServer  = "server"  // Redis answered with an error (WRONGTYPE, OOM, script error...)
	RedisErrOther   = "other"
)

// RedisMetrics is a go-redis hook counting commands and errors for every
// Redis user at once (breaker sync, ledger, budgets, reservations), so one
// panel shows whether Redis is the problem. Add it to the shared client with
// client.AddHook. redis.Nil ("no such key") is not an error.
type RedisMetrics struct {
	commands *prometheus.CounterVec
	errors   *prometheus.CounterVec
}

var _ redis.Hook = (*RedisMetrics)(nil)

// NewRedisMetrics creates the families and registers them with reg (nil:
// create but do not register).
func NewRedisMetrics(reg prometheus.Registerer) *RedisMetrics {
	m := &RedisMetrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRedisCommands,
			Help: "Redis commands sent, by command name (pipelined commands count one each).",
		}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRedisErrors,
			Help: "Redis commands and dials that failed, by command name and kind (dial, timeout, network, server, other).",
		}, []string{"command", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.commands, m.errors)
	}
	return m
}

// DialHook counts failed dials.
func (m *RedisMetrics) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			m.errors.WithLabelValues("dial", RedisErrDial).Inc()
		}
		return c, err
	}
}

// ProcessHook counts one command and its error.
func (m *RedisMetrics) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		m.observe(cmd, err)
		return err
	}
}

// ProcessPipelineHook counts each command of a pipeline or transaction.
func (m *RedisMetrics) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			cerr := c.Err()
			if cerr == nil && err != nil && !isServerError(err) {
				// The pipeline as a whole failed (connection) before this
				// command got an answer.
				cerr = err
			}
			m.observe(c, cerr)
		}
		return err
	}
}

func (m *RedisMetrics) observe(cmd redis.Cmder, err error) {
	// Command names come from our code (go-redis lowercases them), never
	// from request input, so the label is bounded.
	name := cmd.Name()
	m.commands.WithLabelValues(name).Inc()
	if err == nil || errors.Is(err, redis.Nil) || isIdentityHandshake(cmd) {
		return
	}
	m.errors.WithLabelValues(name, redisErrorKind(err)).Inc()
}

// isIdentityHandshake reports the optional commands go-redis sends on every
// new connection (CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS). Servers that
// lack them (Redis before 7.2, e.g. Debian's 7.0; any open-source Redis for
// the second) answer with an error go-redis ignores, so counting it would
// make every idle start look like a Redis problem.
func isIdentityHandshake(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 || cmd.Name() != "client" {
		return false
	}
	sub, ok := args[1].(string)
	return ok && (strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "maint_notifications"))
}

func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func redisErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return RedisErrTimeout
	case isServerError(err):
		return RedisErrServer
	case errors.As(err, &ne), errors.Is(err, redis.ErrClosed), errors.Is(err, net.ErrClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return RedisErrNetwork
	default:
		return RedisErrOther
	}
}
