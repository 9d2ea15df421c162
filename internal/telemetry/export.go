package telemetry

import (
	"context"
	"log/slog"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// health logs an outage (a collector that does not answer, a gauge query
// that fails) once when it starts and once when it ends, rather than once
// per batch.
type health struct {
	log    *slog.Logger
	signal string

	mu      sync.Mutex
	failing bool
}

func newHealth(log *slog.Logger, signal string) *health {
	return &health{log: log, signal: signal}
}

func (h *health) observe(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil && !h.failing:
		h.failing = true
		h.log.Warn("telemetry failing; data is dropped until it recovers", "signal", h.signal, "err", err)
	case err == nil && h.failing:
		h.failing = false
		h.log.Info("telemetry recovered", "signal", h.signal)
	}
}

// spanExporter reports failures through health and swallows them: the SDK
// would otherwise hand each one to the process-global otel error handler.
// A failed batch is dropped either way.
type spanExporter struct {
	sdktrace.SpanExporter
	health *health
}

func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.health.observe(e.SpanExporter.ExportSpans(ctx, spans))
	return nil
}

// metricExporter is spanExporter's counterpart for the periodic reader.
type metricExporter struct {
	sdkmetric.Exporter
	health *health
}

func (e *metricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	e.health.observe(e.Exporter.Export(ctx, rm))
	return nil
}
