package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// A turn sent with a traceparent is one trace from the HTTP request through
// the Enqueue signal to the CallProvider activity, and records the
// provider and turn metrics.
func TestTelemetryTurnJoinsClientTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(telemetry.IDGenerator()))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := telemetry.FromProviders(tp, mp, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)

	fake := fakeprovider.New(t)
	srv := testenv.Start(t, testenv.Options{Telemetry: tel, ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "primary"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "literal-token"
`, fake.URL())})
	pid := srv.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, key := srv.Key(t, pid)
	sid, sk := srv.Open(t, key, map[string]any{"client_version": "test"})
	srv.Call(t, sid, sk, "session.registerDriver", nil)

	const traceID, spanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
		"params": map[string]any{"message": map[string]any{"role": "user", "content": "hello"}}})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, srv.ClientURL+"/api/v1/sessions/"+sid+"/rpc", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+sk)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("traceparent"))
	require.Contains(t, string(raw), `"result"`, string(raw))

	// The answer is stored before the turn's spans end (the activity's,
	// then the SendIdle handler's): wait for them. The turn's metrics are
	// recorded in the activity, so they are in once RunActivity ended.
	// The session is idle: the turn is a SendIdle Update (on by default).
	want := []string{"POST /api/v1/sessions/{id}/rpc", "UpdateWithStartWorkflow:SendIdle", "HandleUpdate:SendIdle", "RunActivity:CallProvider"}
	var byName map[string]sdktrace.ReadOnlySpan
	var names []string
	collect := func() bool {
		byName, names = map[string]sdktrace.ReadOnlySpan{}, nil
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == traceID {
				byName[s.Name()] = s
				names = append(names, s.Name())
			}
		}
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, collect, 30*time.Second, 20*time.Millisecond) {
		collect()
		for _, n := range want {
			assert.Contains(t, byName, n, "spans in the client's trace: %v", names)
		}
		t.FailNow()
	}
	httpSpan := byName["POST /api/v1/sessions/{id}/rpc"]
	assert.Equal(t, spanID, httpSpan.Parent().SpanID().String())
	assert.Contains(t, httpSpan.Attributes(), attribute.String("bae.session.id", sid))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	sums := map[string]metricdata.Sum[int64]{}
	gauges := map[string]metricdata.Gauge[int64]{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				sums[m.Name] = d
			case metricdata.Gauge[int64]:
				gauges[m.Name] = d
			}
		}
	}
	requireCount := func(name string, want int64, attrs ...attribute.KeyValue) {
		t.Helper()
		s, ok := sums[name]
		require.True(t, ok, "%s not recorded", name)
		require.Len(t, s.DataPoints, 1, name)
		assert.Equal(t, want, s.DataPoints[0].Value, name)
		for _, a := range attrs {
			v, ok := s.DataPoints[0].Attributes.Value(a.Key)
			assert.True(t, ok && v == a.Value, "%s: %s", name, a.Key)
		}
	}
	requireCount(telemetry.MetricProviderRequests, 1, attribute.String("provider", "anthropic"), attribute.String("outcome", "ok"))
	requireCount(telemetry.MetricTurnsCompleted, 1, attribute.String("outcome", "completed"))
	gauge := func(name string) int64 {
		t.Helper()
		g, ok := gauges[name]
		require.True(t, ok, "%s not recorded", name)
		require.Len(t, g.DataPoints, 1)
		return g.DataPoints[0].Value
	}
	assert.Equal(t, int64(1), gauge(telemetry.MetricSessionsOpen))
	assert.Equal(t, int64(1), gauge(telemetry.MetricDriversRegistered))
	assert.Positive(t, gauge(telemetry.MetricEventsTotal))
	// The Temporal SDK's own metrics share the meter provider.
	assert.Greater(t, len(rm.ScopeMetrics), 1)
}
