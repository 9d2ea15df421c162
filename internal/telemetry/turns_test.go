package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/workflows"
)

// turnsWorkflow answers SendMessage updates from a script, standing in for
// the Session workflow: the interceptor only sees the update's input and
// result.
func turnsWorkflow(results map[string]workflows.TurnResult) func(workflow.Context) error {
	return func(ctx workflow.Context) error {
		if err := workflow.SetUpdateHandler(ctx, workflows.UpdateSendMessage, func(ctx workflow.Context, in workflows.SendMessageInput) (workflows.TurnResult, error) {
			if err := workflow.Sleep(ctx, time.Second); err != nil {
				return workflows.TurnResult{}, err
			}
			if in.TurnID == "boom" {
				return workflows.TurnResult{}, errors.New("broken")
			}
			return results[in.TurnID], nil
		}); err != nil {
			return err
		}
		return workflow.Sleep(ctx, time.Hour)
	}
}

func TestTurnInterceptorLogsAndEmitsEachTurn(t *testing.T) {
	tel, rec := withIDs(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))

	// Span refs as the API allocates them, under the turns' requests.
	tracer := tel.TracerProvider.Tracer("test")
	ref := func() (string, trace.Span) {
		ctx, req := tracer.Start(context.Background(), "request")
		defer req.End()
		return tel.Spans.ChildRef(ctx), req
	}
	sessionRef, _ := ref()
	pausedRef, pausedReq := ref()
	resumeRef, _ := ref()
	failRef, _ := ref()
	boomRef, _ := ref()
	results := map[string]workflows.TurnResult{
		"paused":   {Outcome: workflows.OutcomePaused, Provider: "primary"},
		"resume":   {Outcome: workflows.OutcomeCompleted, Provider: "fallback", Resumed: true, ResumedSpan: pausedRef},
		"fail":     {Outcome: workflows.OutcomeProvidersFailed, Reason: events.ReasonAllProvidersFailed, LastError: "fallback: HTTP 502"},
		"rejected": {Outcome: workflows.OutcomeRejected, ErrorCode: -32000},
	}
	spans := map[string]string{"paused": pausedRef, "resume": resumeRef, "fail": failRef, "boom": boomRef, "rejected": ""}

	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{telemetry.TurnInterceptor(tel.Spans, log)}})
	env.RegisterWorkflowWithOptions(turnsWorkflow(results), workflow.RegisterOptions{Name: "turns"})
	for i, turn := range []string{"paused", "resume", "fail", "rejected", "boom"} {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(workflows.UpdateSendMessage, turn, &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
			}, workflows.SendMessageInput{TurnID: turn, ClientKeyID: "key_a", Span: spans[turn], SessionSpan: sessionRef})
		}, time.Duration(i+1)*time.Minute)
	}
	env.ExecuteWorkflow("turns")
	require.True(t, env.IsWorkflowCompleted())

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == telemetry.SpanTurn {
			byName[s.SpanContext().SpanID().String()] = s
		}
	}
	require.Len(t, byName, 4, "no span for the rejected message")
	turnSpan := func(ref string) sdktrace.ReadOnlySpan {
		t.Helper()
		id := strings.Split(strings.Split(ref, "/")[0], "-")[2]
		s, ok := byName[id]
		require.True(t, ok, "a bae.turn with the ref's id")
		return s
	}
	paused, resumed, failed, boom := turnSpan(pausedRef), turnSpan(resumeRef), turnSpan(failRef), turnSpan(boomRef)
	assert.Equal(t, pausedReq.SpanContext().SpanID(), paused.Parent().SpanID(), "a child of its request")
	a := attrs(paused)
	assert.Equal(t, workflows.OutcomePaused, a[telemetry.AttrTurnOutcome].AsString())
	assert.False(t, a[telemetry.AttrTurnResumed].AsBool())
	assert.Equal(t, "key_a", a[telemetry.AttrClientKeyID].AsString())
	assert.Equal(t, "default-test-workflow-id", a[telemetry.AttrSessionID].AsString())
	require.Len(t, paused.Links(), 1)
	assert.Equal(t, telemetry.LinkSession, paused.Links()[0].Attributes[0].Value.AsString())
	assert.Equal(t, codes.Unset, paused.Status().Code)

	assert.True(t, attrs(resumed)[telemetry.AttrTurnResumed].AsBool())
	require.Len(t, resumed.Links(), 2)
	assert.Equal(t, paused.SpanContext().SpanID(), resumed.Links()[1].SpanContext.SpanID())
	assert.Equal(t, telemetry.LinkResume, resumed.Links()[1].Attributes[0].Value.AsString())

	assert.Equal(t, codes.Error, failed.Status().Code)
	assert.Equal(t, "all providers failed", failed.Status().Description)
	assert.Equal(t, codes.Error, boom.Status().Code)
	assert.Equal(t, "session loop failed", boom.Status().Description)
	assert.NotContains(t, attrs(boom), telemetry.AttrTurnOutcome)

	// One line per turn; a turn's start is when its update began.
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 5, logs.String())
	assert.Equal(t, "turn finished", lines[0]["msg"])
	assert.Equal(t, "INFO", lines[0]["level"])
	assert.Equal(t, "paused", lines[0]["turn_id"])
	assert.Equal(t, workflows.OutcomePaused, lines[0]["outcome"])
	assert.Equal(t, "primary", lines[0]["provider"])
	assert.Contains(t, lines[0], "duration_ms")
	assert.Equal(t, "default-test-workflow-id", lines[0]["session_id"])
	assert.Equal(t, true, lines[1]["resumed"])
	assert.Equal(t, string(events.ReasonAllProvidersFailed), lines[2]["reason"])
	assert.NotContains(t, lines[2], "provider")
	assert.Equal(t, workflows.OutcomeRejected, lines[3]["outcome"])
	assert.Equal(t, "WARN", lines[4]["level"])
}
