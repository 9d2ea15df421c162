package launcher

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
)

// Seconds reads a whole number of seconds from the variable name (def when
// unset); anything else is a usage error (exit 2).
func Seconds(lookup func(string) (string, bool), name string, def time.Duration) (time.Duration, error) {
	v, ok := lookup(name)
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, &UsageError{Msg: fmt.Sprintf("%s: %q is not a whole number of seconds", name, v)}
	}
	return time.Duration(n) * time.Second, nil
}

// Get is the variable's value, or def when unset or blank.
func Get(lookup func(string) (string, bool), name, def string) string {
	if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return def
}

// NewLogger is a launcher's own stderr log, set like baesrv's (BAE_LOG,
// BAE_LOG_FORMAT; config.LogFromEnv). Its text lines carry each message as
// written, as BAE's launchers do (textHandler).
func NewLogger(w io.Writer, lc config.Log) *slog.Logger {
	o := &slog.HandlerOptions{Level: lc.Level}
	if lc.JSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(newTextHandler(w, o))
}

// DialTemporal connects to the Temporal cluster baesrv uses
// (BAE_TEMPORAL_ADDR, BAE_TEMPORAL_NAMESPACE and the TLS settings).
func DialTemporal(lookup func(string) (string, bool), log *slog.Logger) (client.Client, error) {
	addr, ns, conn, err := config.TemporalFromEnv(lookup)
	if err != nil {
		return nil, &UsageError{Msg: err.Error()}
	}
	opts := client.Options{HostPort: addr, Namespace: ns, Logger: sdklog.NewStructuredLogger(log.With("component", "temporal"))}
	if err := app.TemporalConnection(&opts, conn); err != nil {
		return nil, &UsageError{Msg: err.Error()}
	}
	c, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s: %w", opts.HostPort, err)
	}
	return c, nil
}
