package main

import (
	"context"
	"fmt"
	"log/slog"
)

// redisLogger sends go-redis' internal messages (dial failures while Redis
// is down, one per attempt) to slog at debug level: every Redis user already
// logs and counts its own failures under its failure mode.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
