package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/internal/telemetry"
)

// newTelemetry returns opts.Telemetry, or the pipeline [telemetry] in the
// config file describes.
func newTelemetry(ctx context.Context, opts Options, log *slog.Logger) (*telemetry.Telemetry, error) {
	if opts.Telemetry != nil {
		return opts.Telemetry, nil
	}
	return telemetry.New(ctx, opts.File.TelemetryConfig(), telemetry.Options{Log: log, Version: Version})
}

// flushTelemetry flushes and stops the exporters by deadline (zero: the
// whole budget from now, for a server that never got to serve).
func flushTelemetry(tel *telemetry.Telemetry, deadline time.Time, budget time.Duration, log *slog.Logger) {
	if deadline.IsZero() {
		deadline = time.Now().Add(budget)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		log.Warn("telemetry flush incomplete", "err", err)
	}
}
