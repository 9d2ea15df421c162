// Package telemetry builds the server's OpenTelemetry tracer and meter
// providers from [telemetry] in bae-config.toml and hands them, explicitly,
// to the HTTP routers, the Temporal client and worker, and the activities.
// Nothing here touches the otel globals: every consumer gets its provider
// passed in, so tests can run several servers side by side.
//
// Disabled (the default) means no-op providers, handlers returned unwrapped,
// no Temporal interceptors and no network traffic.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/bae-go/bae-go/internal/config"
)

// ScopeName is the instrumentation scope of the server's own tracers and
// meters (the reference server uses the same literal).
const ScopeName = "baesrv"

// exportTimeout bounds one OTLP export so a hung collector cannot hold the
// batch processor or the periodic reader for long.
const exportTimeout = 10 * time.Second

// Options are New's collaborators.
type Options struct {
	Log *slog.Logger // required
	// Version is reported as service.version.
	Version string
	// Lookup resolves ${VAR} tokens in otlp_headers (default os.LookupEnv).
	Lookup func(string) (string, bool)
	// Prometheus adds a pull reader whose exposition MetricsHandler serves
	// (BAE_METRICS_ADDR), with or without OTLP export.
	Prometheus bool
}

// Telemetry is the server's telemetry pipeline. The zero value is not
// usable; build one with New, Disabled or FromProviders.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// Metrics records the bae.* instruments; nil when metrics are off
	// (every Metrics method accepts a nil receiver).
	Metrics *Metrics
	// Spans emits the bae.* spans; it records nothing when tracing is off.
	Spans *Spans

	log         *slog.Logger
	traces      bool
	metrics     bool
	interceptor interceptor.Interceptor
	prometheus  http.Handler
	shutdown    []func(context.Context) error
}

// Disabled returns a pipeline that records and sends nothing.
func Disabled() *Telemetry {
	return &Telemetry{
		TracerProvider: tracenoop.NewTracerProvider(),
		MeterProvider:  metricnoop.NewMeterProvider(),
		Propagator:     propagation.TraceContext{},
		Spans:          NewSpans(nil),
		log:            slog.New(slog.DiscardHandler),
	}
}

// New builds the pipeline cfg describes. Exporters connect lazily, so an
// unreachable collector never delays startup or fails a request.
func New(ctx context.Context, cfg config.Telemetry, opts Options) (*Telemetry, error) {
	log := opts.Log
	otlpTraces := cfg.Enabled && cfg.Traces.Enabled
	otlpMetrics := cfg.Enabled && cfg.Metrics.Enabled
	if !otlpTraces && !otlpMetrics && !opts.Prometheus {
		t := Disabled()
		t.log = log
		return t, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cfg.EffectiveServiceName()),
		attribute.String("service.version", opts.Version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	var headers map[string]string
	if otlpTraces || otlpMetrics {
		lookup := opts.Lookup
		if lookup == nil {
			lookup = os.LookupEnv
		}
		// Resolved here, immediately before the exporters are built, and held
		// only by them.
		if headers, err = cfg.ResolveOTLPHeaders(lookup); err != nil {
			return nil, &config.ValidationError{Msg: "[telemetry] otlp_headers", Err: err}
		}
	}

	var tp trace.TracerProvider
	var mp metric.MeterProvider
	var shutdown []func(context.Context) error
	if otlpTraces {
		exp, err := otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint),
			otlptracegrpc.WithHeaders(headers),
			otlptracegrpc.WithTimeout(exportTimeout))
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		sdkTP := sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(&spanExporter{SpanExporter: exp, health: newHealth(log, "traces")}),
			sdktrace.WithSampler(Sampler(cfg.SampleRatio)),
			sdktrace.WithIDGenerator(IDGenerator()),
			sdktrace.WithResource(res),
		)
		tp = sdkTP
		shutdown = append(shutdown, sdkTP.Shutdown)
	}
	var readers []sdkmetric.Option
	if otlpMetrics {
		exp, err := otlpmetricgrpc.New(ctx,
			otlpmetricgrpc.WithEndpointURL(cfg.OTLPEndpoint),
			otlpmetricgrpc.WithHeaders(headers),
			otlpmetricgrpc.WithTimeout(exportTimeout))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("otlp metric exporter: %w", err), shutdownAll(ctx, shutdown))
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(&metricExporter{Exporter: exp, health: newHealth(log, "metrics")})))
	}
	var promHandler http.Handler
	if opts.Prometheus {
		reader, handler, err := newPrometheus()
		if err != nil {
			return nil, errors.Join(err, shutdownAll(ctx, shutdown))
		}
		readers = append(readers, sdkmetric.WithReader(reader))
		promHandler = handler
	}
	if len(readers) > 0 {
		sdkMP := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		mp = sdkMP
		shutdown = append(shutdown, sdkMP.Shutdown)
	}
	var disabled []string
	if cfg.Enabled {
		disabled = cfg.Metrics.Disabled
	}
	t, err := FromProviders(tp, mp, disabled, log)
	if err != nil {
		return nil, errors.Join(err, shutdownAll(ctx, shutdown))
	}
	t.shutdown = shutdown
	t.prometheus = promHandler
	if otlpTraces || otlpMetrics {
		log.Info("telemetry export enabled", "endpoint", cfg.OTLPEndpoint, "traces", otlpTraces, "metrics", otlpMetrics, "sample_ratio", cfg.SampleRatio)
	}
	return t, nil
}

// MetricsHandler serves the Prometheus exposition of every instrument
// (bae.* and the Temporal SDK's); nil unless New was asked for it.
func (t *Telemetry) MetricsHandler() http.Handler { return t.prometheus }

// Sampler is the trace sampler: an incoming traceparent's decision is
// always kept, sampled or not; ratio applies only to traces baesrv roots.
func Sampler(ratio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}

// FromProviders builds a pipeline over providers the caller owns (tests,
// embedders); Shutdown leaves them running. A nil provider switches that
// signal off. disabled lists bae.* instruments to suppress.
func FromProviders(tp trace.TracerProvider, mp metric.MeterProvider, disabled []string, log *slog.Logger) (*Telemetry, error) {
	t := Disabled()
	t.log = log
	if tp != nil {
		t.TracerProvider, t.traces = tp, true
		t.Spans = NewSpans(tp)
		ic, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
			Tracer:            tp.Tracer("temporal-sdk-go"),
			TextMapPropagator: t.Propagator,
			// Workflows started before tracing was switched on carry no span
			// header; they must keep running.
			AllowInvalidParentSpans: true,
		})
		if err != nil {
			return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
		}
		t.interceptor = ic
	}
	if mp != nil {
		m, err := NewMetrics(mp, disabled, log)
		if err != nil {
			return nil, err
		}
		t.MeterProvider, t.metrics, t.Metrics = mp, true, m
	}
	return t, nil
}

// Enabled reports whether anything is recorded at all.
func (t *Telemetry) Enabled() bool { return t.traces || t.metrics }

// Shutdown flushes buffered spans and metrics and stops the exporters,
// giving up when ctx ends (the remaining shutdown budget).
func (t *Telemetry) Shutdown(ctx context.Context) error {
	err := shutdownAll(ctx, t.shutdown)
	t.shutdown = nil
	return err
}

func shutdownAll(ctx context.Context, fns []func(context.Context) error) error {
	var errs []error
	for _, fn := range fns {
		if err := fn(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry shutdown: %w", err)
	}
	return nil
}

// TemporalOptions adds the tracing interceptor (client spans, and workflow
// and activity spans on workers built from the client, all joined through
// the Temporal headers) and the SDK metrics handler to o. With telemetry
// off o is returned unchanged.
func (t *Telemetry) TemporalOptions(o client.Options) client.Options {
	if t.interceptor != nil {
		o.Interceptors = append(o.Interceptors, t.interceptor)
	}
	if t.metrics {
		o.MetricsHandler = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter:                t.MeterProvider.Meter("temporal-sdk-go"),
			UseMonotonicCounters: true,
			// The default panics; a metrics error must never take a worker down.
			OnError: func(err error) { t.log.Debug("temporal sdk metric", "err", err) },
		})
	}
	return o
}
