package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
)

// newTelemetry returns opts.Telemetry, or the pipeline [telemetry] in the
// config file describes.
func newTelemetry(ctx context.Context, opts Options, log *slog.Logger) (*telemetry.Telemetry, error) {
	if opts.Telemetry != nil {
		return opts.Telemetry, nil
	}
	return telemetry.New(ctx, opts.File.TelemetryConfig(), telemetry.Options{Log: log, Version: Version, Prometheus: opts.Server.MetricsAddr != ""})
}

// serveMetrics mounts GET /metrics (BAE_METRICS_ADDR) on the admin server,
// or returns a server and listener of its own. Scrapes get no spans. With
// withPprof (BAE_PPROF) the runtime's profiles are served beside it.
func serveMetrics(addr string, withPprof bool, tel *telemetry.Telemetry, admin *http.Server, log *slog.Logger) (*http.Server, net.Listener, error) {
	if addr == "" {
		return nil, nil, nil
	}
	h := tel.MetricsHandler()
	if h == nil {
		// A caller-supplied pipeline (Options.Telemetry) without a
		// Prometheus reader.
		log.Warn("BAE_METRICS_ADDR is set but the telemetry pipeline has no Prometheus reader; /metrics is not served")
		return nil, nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	if withPprof {
		mountPprof(mux)
	}
	if addr == config.MetricsOnAdmin {
		mux.Handle("/", admin.Handler)
		admin.Handler = mux
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on BAE_METRICS_ADDR %s: %w", addr, err)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// mountPprof serves net/http/pprof's index and named profiles (goroutine,
// heap, ...), CPU profile, trace and symbols, not the command line.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
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
