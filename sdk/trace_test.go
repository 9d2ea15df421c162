package sdk_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bae-go/bae-go/sdk"
)

// TestSpans gives the harness an OpenTelemetry SDK tracer provider and
// checks its spans and that traceparent names the send span.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			w.result(c, result(`[{"type":"tool_use","id":"tu_1","name":"get_time","input":{},"dispatch":"client"},
				{"type":"tool_use","id":"tu_2","name":"remote","input":{},"dispatch":"mcp"}]`))
			return
		}
		w.result(c, result(`[{"type":"text","text":"ok"}]`))
	}
	var calls []string
	cfg := f.cfg()
	cfg.TracerProvider = tp
	s, err := sdk.Connect(context.Background(), cfg, sdk.WithTool(timeTool(&calls)))
	require.NoError(t, err)
	ctx, root := tp.Tracer("app").Start(context.Background(), "app.request")
	_, err = s.Send(ctx, "hi")
	root.End()
	require.NoError(t, err)

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	require.Len(t, byName["bae.client.send"], 2, "a paused/resumed turn is two sibling send spans")
	require.Len(t, byName["bae.client.tool"], 1, "no span for the server-owned block")
	first := byName["bae.client.send"][0]
	assert.Equal(t, root.SpanContext().SpanID(), first.Parent().SpanID())
	tool := byName["bae.client.tool"][0]
	assert.Equal(t, first.SpanContext().SpanID(), tool.Parent().SpanID())
	attrs := map[string]string{}
	for _, kv := range tool.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	assert.Equal(t, map[string]string{"bae.tool.name": "get_time", "bae.tool.dispatch": "client"}, attrs)

	sends := f.rpcCalls("session.sendMessage")
	want := "00-" + first.SpanContext().TraceID().String() + "-" + first.SpanContext().SpanID().String() + "-01"
	assert.Equal(t, want, sends[0].Header.Get("traceparent"), "the server's spans join under bae.client.send")
}
