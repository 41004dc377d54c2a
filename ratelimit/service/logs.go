package service

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/sirupsen/logrus"
)

// RouteLibraryLogs sends envoyproxy/ratelimit's log lines (it logs through
// the process-global logrus logger) to l, its info lines at debug level.
// It changes that global logger, so call it once from main, not from
// library code. Without it the library writes text lines to stderr.
func RouteLibraryLogs(l *slog.Logger) {
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.InfoLevel)
	logrus.AddHook(slogHook{l})
}

type slogHook struct{ l *slog.Logger }

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h slogHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, barrierMsg) {
		return nil
	}
	lvl := slog.LevelDebug
	switch {
	case e.Level <= logrus.ErrorLevel:
		lvl = slog.LevelError
	case e.Level == logrus.WarnLevel:
		lvl = slog.LevelWarn
	}
	h.l.Log(context.Background(), lvl, e.Message, "component", "envoyproxy/ratelimit")
	return nil
}
