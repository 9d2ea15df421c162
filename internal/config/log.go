package config

import (
	"log/slog"
	"strings"

	"github.com/bae-go/bae-go/internal/lib/logfilter"
)

// Log is how baesrv writes its stderr log (BAE_LOG, BAE_LOG_FORMAT).
type Log struct {
	// Level is BAE_LOG's level for baesrv: its default directive ("debug",
	// "info,…") or its baesrv target's; info when it names none.
	Level slog.Level
	// JSON is BAE_LOG_FORMAT=json: one JSON object per line for a log
	// collector; anything else is the text format.
	JSON bool
	// Ignored lists BAE_LOG directives that name no part of this server.
	Ignored []string
}

// LogFromEnv reads BAE_LOG (BAE's filter strings, package logfilter) and
// BAE_LOG_FORMAT through lookup. They never fail: a log setting should not
// stop a server.
func LogFromEnv(lookup func(string) (string, bool)) Log {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	f := logfilter.Parse(get("BAE_LOG"))
	return Log{Level: f.Level(), JSON: strings.EqualFold(get("BAE_LOG_FORMAT"), "json"), Ignored: f.Ignored}
}
