package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
)

func withIDs(t *testing.T) (*telemetry.Telemetry, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(telemetry.IDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.FromProviders(tp, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return tel, rec
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestHTTPSpansFollowTheContract(t *testing.T) {
	tel, rec := withIDs(t)
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/things/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	r.Get("/boom", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	h := tel.HTTP(r)

	get(t, h, "/healthz", nil)
	assert.Empty(t, rec.Ended(), "/healthz has no span")

	get(t, h, "/things/thg_123", nil)
	get(t, h, "/boom", nil)
	get(t, h, "/nowhere", nil)
	spans := rec.Ended()
	require.Len(t, spans, 3)
	for _, s := range spans {
		assert.Equal(t, telemetry.ScopeName, s.InstrumentationScope().Name)
		assert.Equal(t, trace.SpanKindServer, s.SpanKind())
	}
	thing := spans[0]
	assert.Equal(t, "GET /things/{id}", thing.Name(), "the route, never the raw path")
	a := attrs(thing)
	assert.Equal(t, "GET", a[telemetry.AttrHTTPMethod].AsString())
	assert.Equal(t, "/things/{id}", a[telemetry.AttrHTTPRoute].AsString())
	assert.Equal(t, "/things/thg_123", a[telemetry.AttrURLPath].AsString())
	assert.Equal(t, int64(http.StatusTeapot), a[telemetry.AttrHTTPStatus].AsInt64())
	assert.Equal(t, codes.Unset, thing.Status().Code, "a 4xx is the client's error")

	boom := spans[1]
	assert.Equal(t, codes.Error, boom.Status().Code)
	assert.Equal(t, "HTTP 502", boom.Status().Description)

	assert.Equal(t, "GET", spans[2].Name(), "no route: the method alone")
}

// A span emitted after the fact from its ref keeps the id its children were
// started under, its parent, its times and its links.
func TestEmittedSpanKeepsItsRefsIdentity(t *testing.T) {
	tel, rec := withIDs(t)
	ctx, req := tel.TracerProvider.Tracer("test").Start(context.Background(), "request")
	ref := tel.Spans.ChildRef(ctx)
	require.NotEmpty(t, ref)
	req.End()

	// A child started elsewhere from the ref alone, before the span exists.
	_, child := tel.Spans.StartUnder(context.Background(), ref, "child")
	child.End()
	other := tel.Spans.ChildRef(ctx)
	link, ok := telemetry.Link(other, telemetry.LinkSession)
	require.True(t, ok)

	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	end := start.Add(30 * time.Second)
	tel.Spans.Emit(ref, telemetry.Record{Name: "later", Kind: trace.SpanKindInternal, Start: start, End: end,
		Attrs: []attribute.KeyValue{attribute.String("k", "v")}, Links: []trace.Link{link}, Error: "went wrong"})

	spans := rec.Ended()
	require.Len(t, spans, 3)
	got, kid := spans[2], spans[1]
	assert.Equal(t, "later", got.Name())
	assert.Equal(t, kid.Parent().SpanID(), got.SpanContext().SpanID(), "the child points at the emitted span")
	assert.Equal(t, req.SpanContext().SpanID(), got.Parent().SpanID())
	assert.Equal(t, req.SpanContext().TraceID(), got.SpanContext().TraceID())
	assert.Equal(t, start, got.StartTime())
	assert.Equal(t, end, got.EndTime())
	assert.Equal(t, codes.Error, got.Status().Code)
	require.Len(t, got.Links(), 1)
	assert.Equal(t, attribute.String(telemetry.AttrLinkKind, telemetry.LinkSession), got.Links()[0].Attributes[0])

	// Nothing to allocate without a span in the context, nothing to emit
	// from an empty or malformed ref.
	assert.Empty(t, tel.Spans.ChildRef(context.Background()))
	tel.Spans.Emit("", telemetry.Record{Name: "x"})
	tel.Spans.Emit("00-zz/xx", telemetry.Record{Name: "x"})
	assert.Len(t, rec.Ended(), 3)
	var off *telemetry.Spans
	assert.Empty(t, off.ChildRef(ctx), "a nil *Spans records nothing")
	off.Emit(ref, telemetry.Record{Name: "x"})
}

// An unsampled request's turn is not recorded either.
func TestEmitHonoursTheParentsSamplingDecision(t *testing.T) {
	tel, rec := withIDs(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true})
	ref := tel.Spans.ChildRef(trace.ContextWithRemoteSpanContext(context.Background(), sc))
	require.NotEmpty(t, ref)
	tel.Spans.Emit(ref, telemetry.Record{Name: "turn", Start: time.Now(), End: time.Now()})
	assert.Empty(t, rec.Ended())
}

// BAE_METRICS_ADDR alone (no [telemetry]) serves the bae.* instruments.
func TestPrometheusWithoutOTLP(t *testing.T) {
	tel, err := telemetry.New(context.Background(), config.DefaultTelemetry(), telemetry.Options{Prometheus: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	require.NotNil(t, tel.Metrics)
	require.NotNil(t, tel.MetricsHandler())
	assert.False(t, tel.Spans.Enabled(), "metrics only")
	src := &counts{}
	require.NoError(t, tel.Metrics.ObserveCounts(src))
	require.NoError(t, tel.Metrics.ObserveMCPSessions(func() int { return 3 }))
	tel.Metrics.TurnCompleted(context.Background(), "completed")

	srv := httptest.NewServer(tel.MetricsHandler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	assert.Contains(t, text, `bae_turns_completed_total{otel_scope_name="baesrv"`)
	assert.Contains(t, text, `outcome="completed"`)
	assert.Contains(t, text, "bae_sessions_open")
	assert.Regexp(t, `bae_mcp_sessions_live[^ ]* 3\n`, text)

	none, err := telemetry.New(context.Background(), config.DefaultTelemetry(), telemetry.Options{})
	require.NoError(t, err)
	assert.Nil(t, none.MetricsHandler())
}
