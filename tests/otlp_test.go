package tests

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
)

// otlpReceiver is an OTLP/gRPC collector in the test process: it keeps
// every span and metric export baesrv sends.
type otlpReceiver struct {
	addr string

	mu      sync.Mutex
	spans   []gotSpan
	metrics map[string]bool // instrument names seen
	raw     []string        // every span export as JSON, for leak checks
}

// gotSpan is one received span with its instrumentation scope.
type gotSpan struct {
	scope string
	*tracepb.Span
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *otlpReceiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	raw, _ := protojson.Marshal(req)
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.raw = append(s.r.raw, string(raw))
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s.r.spans = append(s.r.spans, gotSpan{scope: ss.GetScope().GetName(), Span: sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	r *otlpReceiver
}

func (s metricsService) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				s.r.metrics[m.Name] = true
			}
		}
	}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &otlpReceiver{addr: ln.Addr().String(), metrics: map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{r: r})
	colmetricpb.RegisterMetricsServiceServer(srv, metricsService{r: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// otlpTelemetry is the server's real pipeline (telemetry.New) exporting to
// r, with the Prometheus reader on. Its cleanup, registered before the
// server's, flushes after the server stopped.
func otlpTelemetry(t *testing.T, r *otlpReceiver, log *slog.Logger) *telemetry.Telemetry {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := config.DefaultTelemetry()
	cfg.Enabled = true
	cfg.OTLPEndpoint = "http://" + r.addr
	tel, err := telemetry.New(context.Background(), cfg, telemetry.Options{Version: "test", Prometheus: true, Log: log})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// flushUntil exports what the pipeline buffered and waits until the
// receiver holds at least one span matching want.
func (r *otlpReceiver) flushUntil(t *testing.T, tel *telemetry.Telemetry, want func(gotSpan) bool, what string) {
	t.Helper()
	r.flushUntilN(t, tel, want, 1, what)
}

// flushUntilN is flushUntil for at least n matching spans. A client's
// answer can arrive before the spans of its turn end (a turn's result is
// stored before its span is emitted), so a test waits for every span it
// checks, not only for the one it expects to end last.
func (r *otlpReceiver) flushUntilN(t *testing.T, tel *telemetry.Telemetry, want func(gotSpan) bool, n int, what string) {
	t.Helper()
	type flusher interface{ ForceFlush(context.Context) error }
	if !assert.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.TracerProvider.(flusher).ForceFlush(ctx)
		return len(r.find(want)) >= n
	}, 30*time.Second, 100*time.Millisecond) {
		require.FailNow(t, "waiting for "+what, "want %d, have %d; received: %s", n, len(r.find(want)), r.names())
	}
}

func (r *otlpReceiver) find(want func(gotSpan) bool) []gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []gotSpan
	for _, s := range r.spans {
		if want(s) {
			out = append(out, s)
		}
	}
	return out
}

// one requires exactly one span matching want.
func (r *otlpReceiver) one(t *testing.T, what string, want func(gotSpan) bool) gotSpan {
	t.Helper()
	got := r.find(want)
	require.Len(t, got, 1, "%s; received: %s", what, r.names())
	return got[0]
}

func (r *otlpReceiver) names() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.spans {
		out = append(out, s.Name)
	}
	return strings.Join(out, ", ")
}

func (r *otlpReceiver) payload() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.raw, "\n")
}

// attr renders a span attribute's value ("" when absent).
func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			return fmt.Sprint(v.BoolValue)
		}
		return kv.Value.String()
	}
	return ""
}

func (s gotSpan) attr(key string) string { return attr(s.Attributes, key) }

func (s gotSpan) id() string     { return hex.EncodeToString(s.SpanId) }
func (s gotSpan) parent() string { return hex.EncodeToString(s.ParentSpanId) }
func (s gotSpan) trace() string  { return hex.EncodeToString(s.TraceId) }

func (s gotSpan) childOf(p gotSpan) bool { return s.parent() == p.id() && s.trace() == p.trace() }

// linked reports a link to target with bae.link.kind = kind.
func (s gotSpan) linked(target gotSpan, kind string) bool {
	for _, l := range s.Links {
		if hex.EncodeToString(l.SpanId) == target.id() && attr(l.Attributes, telemetry.AttrLinkKind) == kind {
			return true
		}
	}
	return false
}

func (s gotSpan) failed() bool { return s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR }

func named(name string, kv ...string) func(gotSpan) bool {
	return func(s gotSpan) bool {
		if s.Name != name {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if s.attr(kv[i]) != kv[i+1] {
				return false
			}
		}
		return true
	}
}
