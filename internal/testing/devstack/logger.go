package devstack

import (
	"context"
	"log/slog"
	"strings"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger adapts slog to the Temporal server's logger interface. The
// server logs hundreds of info lines at startup, so everything below min is
// dropped before it reaches the caller's handler. min is shared so Stop can
// silence the expected "context canceled" storm of a shutdown.
type serverLogger struct {
	l   *slog.Logger
	min *slog.LevelVar
}

// levelSilent is above every level the server uses.
const levelSilent = slog.LevelError + 100

var (
	_ log.Logger     = serverLogger{}
	_ log.WithLogger = serverLogger{}
)

func newServerLogger(l *slog.Logger, min *slog.LevelVar) serverLogger {
	return serverLogger{l: l.With("component", "temporal"), min: min}
}

func (s serverLogger) Debug(msg string, tags ...tag.Tag) { s.log(slog.LevelDebug, msg, tags) }
func (s serverLogger) Info(msg string, tags ...tag.Tag)  { s.log(slog.LevelInfo, msg, tags) }
func (s serverLogger) Warn(msg string, tags ...tag.Tag) {
	level := slog.LevelWarn
	if routineWarning(msg) {
		level = slog.LevelDebug
	}
	s.log(level, msg, tags)
}

// routineWarning reports server warnings that are expected in a dev
// server: the Web UI asks for large history pages, and the frontend warns
// twice per page view.
func routineWarning(msg string) bool {
	return strings.HasPrefix(msg, "GetHistory page size is larger than threshold")
}
func (s serverLogger) Error(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// DPanic, Panic and Fatal only log: panicking or exiting inside an embedded
// server would take the whole baesrv process down with it. Start pre-checks
// the ports, the usual cause of a fatal.
func (s serverLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }
func (s serverLogger) Panic(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }
func (s serverLogger) Fatal(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }

func (s serverLogger) With(tags ...tag.Tag) log.Logger {
	return serverLogger{l: s.l.With(attrs(tags)...), min: s.min}
}

func (s serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if level < s.min.Level() || !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, msg, attrs(tags)...)
}

func attrs(tags []tag.Tag) []any {
	out := make([]any, len(tags))
	for i, t := range tags {
		out[i] = slog.Any(t.Key(), t.Value())
	}
	return out
}
