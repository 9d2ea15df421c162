package telemetry_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
)

const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
)

// recorded builds a pipeline whose spans land in the returned recorder.
func recorded(t *testing.T, sampler sdktrace.Sampler) (*telemetry.Telemetry, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.FromProviders(tp, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return tel, rec
}

func get(t *testing.T, h http.Handler, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestHTTPSpanJoinsIncomingTraceparent(t *testing.T) {
	tel, rec := recorded(t, sdktrace.AlwaysSample())
	h := tel.HTTP(api.ClientRouter(&api.Deps{Version: "test", Log: slog.New(slog.DiscardHandler)}))

	w := get(t, h, "/api/v1/meta", map[string]string{
		"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01",
		"tracestate":  "vendor=x",
	})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, w.Header().Get("traceparent"), "trace headers are never echoed")
	assert.Empty(t, w.Header().Get("tracestate"))

	spans := rec.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	assert.Equal(t, trace.SpanKindServer, s.SpanKind())
	assert.Equal(t, "GET /api/v1/meta", s.Name())
	assert.Equal(t, parentTrace, s.SpanContext().TraceID().String())
	assert.Equal(t, parentTrace, s.Parent().TraceID().String())
	assert.Equal(t, parentSpan, s.Parent().SpanID().String())
	assert.True(t, s.Parent().IsRemote())
	assert.Equal(t, "vendor=x", s.SpanContext().TraceState().String())
}

func TestHTTPMalformedTraceparentStartsNewTrace(t *testing.T) {
	tel, rec := recorded(t, sdktrace.AlwaysSample())
	h := tel.HTTP(api.ClientRouter(&api.Deps{Version: "test", Log: slog.New(slog.DiscardHandler)}))

	for _, bad := range []string{"garbage", "00-" + parentTrace + "-0000000000000000-01", "00-00000000000000000000000000000000-" + parentSpan + "-01"} {
		w := get(t, h, "/api/v1/meta", map[string]string{"traceparent": bad})
		require.Equal(t, http.StatusOK, w.Code, bad)
	}
	spans := rec.Ended()
	require.Len(t, spans, 3)
	for _, s := range spans {
		assert.False(t, s.Parent().IsValid(), "a malformed traceparent counts as absent")
		assert.True(t, s.SpanContext().TraceID().IsValid())
		assert.NotEqual(t, parentTrace, s.SpanContext().TraceID().String())
		assert.Equal(t, "GET /api/v1/meta", s.Name())
	}
}

func TestSamplerHonoursIncomingDecision(t *testing.T) {
	// Ratio 0: only an incoming sampled decision produces spans.
	tel, rec := recorded(t, telemetry.Sampler(0))
	h := tel.HTTP(api.ClientRouter(&api.Deps{Version: "test", Log: slog.New(slog.DiscardHandler)}))

	get(t, h, "/api/v1/meta", nil)
	get(t, h, "/api/v1/meta", map[string]string{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-00"})
	assert.Empty(t, rec.Ended(), "root and unsampled-parent requests are not sampled")

	get(t, h, "/api/v1/meta", map[string]string{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01"})
	require.Len(t, rec.Ended(), 1)
	assert.Equal(t, parentTrace, rec.Ended()[0].SpanContext().TraceID().String())
}

func TestDisabledInstallsNoops(t *testing.T) {
	off := config.DefaultTelemetry() // enabled = false
	parked := config.DefaultTelemetry()
	parked.Enabled = true
	parked.OTLPEndpoint = "http://127.0.0.1:1"
	parked.Traces.Enabled, parked.Metrics.Enabled = false, false

	for name, cfg := range map[string]config.Telemetry{"disabled": off, "both signals off": parked} {
		t.Run(name, func(t *testing.T) {
			tel, err := telemetry.New(context.Background(), cfg, telemetry.Options{})
			require.NoError(t, err)
			assert.False(t, tel.Enabled())
			assert.IsType(t, tracenoop.TracerProvider{}, tel.TracerProvider)
			assert.IsType(t, metricnoop.MeterProvider{}, tel.MeterProvider)
			assert.Nil(t, tel.Metrics)

			h := api.ClientRouter(&api.Deps{Version: "test", Log: slog.New(slog.DiscardHandler)})
			assert.Same(t, h, tel.HTTP(h), "the router is not wrapped")
			o := tel.TemporalOptions(client.Options{Namespace: "default"})
			assert.Empty(t, o.Interceptors)
			assert.Nil(t, o.MetricsHandler)
			require.NoError(t, tel.Shutdown(context.Background()))
		})
	}
	// A nil *Metrics records nothing and does not panic.
	var m *telemetry.Metrics
	m.TurnCompleted(context.Background(), "completed")
	m.ProviderRequest(context.Background(), "anthropic", "ok", time.Millisecond)
	require.NoError(t, m.ObserveCounts(nil))
}

func TestEnabledBuildsExportersWithoutConnecting(t *testing.T) {
	cfg := config.DefaultTelemetry()
	cfg.Enabled = true
	// Nothing listens here: construction must not dial, and shutdown must
	// stay within its budget.
	cfg.OTLPEndpoint = "http://127.0.0.1:1"
	cfg.OTLPHeaders = map[string]string{"Authorization": "Bearer ${TEL_TEST_TOKEN}"}
	lookup := func(k string) (string, bool) {
		if k == "TEL_TEST_TOKEN" {
			return "secret", true
		}
		return "", false
	}
	tel, err := telemetry.New(context.Background(), cfg, telemetry.Options{Lookup: lookup, Version: "test", Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	assert.True(t, tel.Enabled())
	assert.IsType(t, &sdktrace.TracerProvider{}, tel.TracerProvider)
	assert.IsType(t, &sdkmetric.MeterProvider{}, tel.MeterProvider)
	require.NotNil(t, tel.Metrics)
	o := tel.TemporalOptions(client.Options{})
	assert.Len(t, o.Interceptors, 1)
	assert.NotNil(t, o.MetricsHandler)

	_, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "s")
	span.End()
	tel.Metrics.TurnCompleted(context.Background(), "completed")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = tel.Shutdown(ctx)
	assert.Less(t, time.Since(start), 5*time.Second)

	// An unresolvable header token is a startup error.
	_, err = telemetry.New(context.Background(), cfg, telemetry.Options{Lookup: func(string) (string, bool) { return "", false }, Log: slog.New(slog.DiscardHandler)})
	var ve *config.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.NotContains(t, err.Error(), "secret")
}

type counts struct {
	c   store.ActivityCounts
	err error
}

func (f *counts) ActivityCounts(context.Context) (store.ActivityCounts, error) { return f.c, f.err }

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func TestMetricsHonourDisabledList(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel, err := telemetry.FromProviders(nil, mp, []string{telemetry.MetricProviderLatency, telemetry.MetricSessionsTotal}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	src := &counts{c: store.ActivityCounts{OpenSessions: 2, TotalSessions: 5, Events: 40, Drivers: 3}}
	require.NoError(t, tel.Metrics.ObserveCounts(src))

	ctx := context.Background()
	tel.Metrics.ProviderRequest(ctx, "anthropic", "ok", 12*time.Millisecond)
	tel.Metrics.ProviderRequest(ctx, "anthropic", "error", time.Millisecond)
	tel.Metrics.ToolCall(ctx, "mcp")
	tel.Metrics.ToolLatency(ctx, "mcp", 3*time.Millisecond)
	tel.Metrics.TurnCompleted(ctx, "completed")

	got := collect(t, reader)
	assert.NotContains(t, got, telemetry.MetricProviderLatency)
	assert.NotContains(t, got, telemetry.MetricSessionsTotal)
	for _, name := range []string{telemetry.MetricProviderRequests, telemetry.MetricToolCalls, telemetry.MetricToolLatency, telemetry.MetricTurnsCompleted, telemetry.MetricSessionsOpen, telemetry.MetricEventsTotal, telemetry.MetricDriversRegistered} {
		assert.Contains(t, got, name)
	}
	reqs := got[telemetry.MetricProviderRequests].(metricdata.Sum[int64])
	assert.True(t, reqs.IsMonotonic)
	assert.Len(t, reqs.DataPoints, 2, "one series per outcome")
	open := got[telemetry.MetricSessionsOpen].(metricdata.Gauge[int64])
	require.Len(t, open.DataPoints, 1)
	assert.Equal(t, int64(2), open.DataPoints[0].Value)
	assert.Equal(t, int64(40), got[telemetry.MetricEventsTotal].(metricdata.Gauge[int64]).DataPoints[0].Value)

	// A failing count query omits the gauges rather than reporting zero.
	src.err = errors.New("database down")
	got = collect(t, reader)
	assert.NotContains(t, got, telemetry.MetricSessionsOpen)
	assert.Contains(t, got, telemetry.MetricProviderRequests)
}

// The span wrapper must keep http.ResponseController working (the client
// router sets read deadlines and flushes NDJSON through it).
func TestHTTPWrapperKeepsResponseController(t *testing.T) {
	tel, _ := recorded(t, sdktrace.AlwaysSample())
	srv := httptest.NewServer(tel.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil {
			panic(err)
		}
	})))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
