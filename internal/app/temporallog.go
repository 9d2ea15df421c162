package app

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/log"
)

// newTemporalLogger routes the SDK's logs through slog one level quieter:
// SDK info lines are routine (pollers starting) and would drown ours.
func newTemporalLogger(l *slog.Logger) log.Logger {
	return log.NewStructuredLogger(slog.New(quieter{l.Handler()}))
}

type quieter struct{ h slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool { return q.h.Enabled(ctx, l-4) }

func (q quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level -= 4
	return q.h.Handle(ctx, r)
}

func (q quieter) WithAttrs(a []slog.Attr) slog.Handler { return quieter{q.h.WithAttrs(a)} }
func (q quieter) WithGroup(n string) slog.Handler      { return quieter{q.h.WithGroup(n)} }
