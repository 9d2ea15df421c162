package logfilter

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		level   slog.Level
		ignored []string
	}{
		{"", slog.LevelInfo, nil},
		{"debug", slog.LevelDebug, nil},
		{"WARN", slog.LevelWarn, nil},
		{"error", slog.LevelError, nil},
		{"trace", slog.LevelDebug - 4, nil},
		{"off", Off, nil},
		{"info,baesrv=debug", slog.LevelDebug, nil},
		{"baesrv=debug,tower=warn", slog.LevelDebug, []string{"tower=warn"}},
		{"debug,baesrv=warn", slog.LevelWarn, nil},
		{"warn,hyper=trace,sqlx=debug", slog.LevelWarn, []string{"hyper=trace", "sqlx=debug"}},
		{"info,baesrv::engine=debug,baesrv=warn", slog.LevelDebug, nil},
		{"baesrv[turn]=debug", slog.LevelDebug, nil},
		{"baesrv", slog.LevelDebug - 4, nil},
		{"loud", slog.LevelInfo, []string{"loud"}}, // a bare word that is no level is a target
		{" info , baesrv = error ", slog.LevelError, nil},
		{"info,baesrv=verbose", slog.LevelInfo, []string{"baesrv=verbose"}},
		{"baesrvx=debug", slog.LevelInfo, []string{"baesrvx=debug"}},
		{",,", slog.LevelInfo, nil},
	}
	for _, c := range cases {
		f := Parse(c.in)
		assert.Equal(t, c.level, f.Level(), c.in)
		assert.Equal(t, c.ignored, f.Ignored, c.in)
	}
}
