package config

import (
	"log/slog"
	"strings"
)

// Log is how baesrv writes its stderr log (BAE_LOG, BAE_LOG_FORMAT).
type Log struct {
	// Level is BAE_LOG: debug, info (the default), warn or error; other
	// values mean info.
	Level slog.Level
	// JSON is BAE_LOG_FORMAT=json: one JSON object per line for a log
	// collector; anything else is the text format.
	JSON bool
}

// LogFromEnv reads BAE_LOG and BAE_LOG_FORMAT through lookup. They never
// fail: a log setting should not stop a server.
func LogFromEnv(lookup func(string) (string, bool)) Log {
	get := func(k string) string { v, _ := lookup(k); return strings.ToLower(strings.TrimSpace(v)) }
	var l Log
	switch get("BAE_LOG") {
	case "debug":
		l.Level = slog.LevelDebug
	case "warn":
		l.Level = slog.LevelWarn
	case "error":
		l.Level = slog.LevelError
	}
	l.JSON = get("BAE_LOG_FORMAT") == "json"
	return l
}
