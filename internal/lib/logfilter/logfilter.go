// Package logfilter reads BAE_LOG the way BAE's operators write it: a
// tracing filter string such as "info", "debug" or "info,baesrv=debug,tower=warn",
// a comma-separated list of directives, each a level (the default for every
// target) or target=level.
//
// bae-go's server log is one slog logger, so the only target that maps to
// something is BAE's server crate, "baesrv" (and its modules,
// "baesrv::engine" and the like, which cannot be told apart here): its level
// becomes the server log's level. Every other target (tower, hyper, sqlx, …)
// names a library bae-go does not use and is ignored.
package logfilter

import (
	"log/slog"
	"strings"
)

// ServerTarget is BAE's server crate, the target that maps onto the server log.
const ServerTarget = "baesrv"

// Off is above every level slog logs: "off" disables the log.
const Off = slog.Level(100)

// Filter is a parsed filter string.
type Filter struct {
	// Default is the level of the bare directive (the last one wins), info
	// when there is none.
	Default slog.Level
	// Server is the level given to ServerTarget or one of its modules (the
	// most verbose wins), nil when none was.
	Server *slog.Level
	// Ignored lists directives that map to nothing here: other targets,
	// and entries whose level is not a level.
	Ignored []string
}

// Level is the server log's level: the baesrv directive when there is
// one, otherwise the default.
func (f Filter) Level() slog.Level {
	if f.Server != nil {
		return *f.Server
	}
	return f.Default
}

// Parse reads a filter string; it never fails, so a server never refuses to
// start over its log setting. An empty string is info.
func Parse(s string) Filter {
	f := Filter{Default: slog.LevelInfo}
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		target, lvl, hasLevel := strings.Cut(d, "=")
		target = strings.TrimSpace(target)
		if !hasLevel {
			// A bare word is a level, or a target at the most verbose level.
			if l, ok := level(target); ok {
				f.Default = l
				continue
			}
			lvl = "trace"
		}
		l, ok := level(strings.TrimSpace(lvl))
		// A span filter ("baesrv[turn]=debug") narrows to spans: treat it
		// as its target.
		if i := strings.IndexByte(target, '['); i >= 0 {
			target = target[:i]
		}
		if !ok || !(target == ServerTarget || strings.HasPrefix(target, ServerTarget+"::")) {
			f.Ignored = append(f.Ignored, d)
			continue
		}
		if f.Server == nil || l < *f.Server {
			f.Server = &l
		}
	}
	return f
}

// level maps tracing's level names onto slog's; trace is below debug.
func level(s string) (slog.Level, bool) {
	switch strings.ToLower(s) {
	case "trace":
		return slog.LevelDebug - 4, true
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn", "warning":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	case "off":
		return Off, true
	}
	return 0, false
}
