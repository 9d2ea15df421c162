package tests

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// lostQueuedActs stands in for the store in a session where one turn
// ("lost") began in a workflow task the history lost: PostgreSQL says it
// began and never ended. Another turn's begin hands it back when asked
// to and takes it out of the conversation when not (takenOut). Turns of
// key_r pause on a client tool, holding the gate.
type lostQueuedActs struct {
	mu       sync.Mutex
	lost     *workflows.AheadTurn
	begins   []string
	takenOut []string
	recorded []string
}

func (a *lostQueuedActs) BeginTurn(_ context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.begins = append(a.begins, in.TurnID)
	switch {
	case a.lost == nil:
	case a.lost.TurnID == in.TurnID:
		a.lost = nil
	case in.HandBack:
		return workflows.BeginTurnResult{Outcome: workflows.OutcomeHandedBack, Ahead: []workflows.AheadTurn{*a.lost}}, nil
	default:
		a.takenOut = append(a.takenOut, a.lost.TurnID)
		a.lost = nil
	}
	return workflows.BeginTurnResult{Providers: []string{"primary"}}, nil
}

func (a *lostQueuedActs) CallProvider(ctx context.Context, in workflows.CallProviderInput) (workflows.CallProviderResult, error) {
	var b *workflows.BeginTurnResult
	if in.Begin != nil {
		r, err := a.BeginTurn(ctx, *in.Begin)
		if err != nil || r.Outcome != "" {
			return workflows.CallProviderResult{Begin: &r}, err
		}
		b = &r
	}
	if in.ClientKeyID == "key_r" {
		return workflows.CallProviderResult{OK: true, Begin: b, ToolCalls: []workflows.ToolCall{{ID: "tu_1", Name: "t", Dispatch: events.DispatchClient}}}, nil
	}
	return workflows.CallProviderResult{OK: true, Final: true, Begin: b}, nil
}

func (a *lostQueuedActs) FinishIteration(context.Context, workflows.FinishIterationInput) (workflows.FinishIterationResult, error) {
	return workflows.FinishIterationResult{Paused: true}, nil
}

func (a *lostQueuedActs) RecordTurnResult(_ context.Context, in workflows.RecordTurnResultInput) (workflows.TurnResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recorded = append(a.recorded, in.TurnID+":"+in.Result.Outcome)
	return in.Result, nil
}

func (a *lostQueuedActs) FailTurn(context.Context, workflows.FailTurnInput) error { return nil }
func (a *lostQueuedActs) Cleanup(context.Context, workflows.CleanupInput) error   { return nil }

// TestHandedBackQueuedTurnHistory runs, on a Temporal server, the session
// of workflows' TestHandedBackQueuedTurnRunsFirst: a lost turn's signal
// redelivered and queued, a busy-interrupt turn put ahead of it (both
// behind a pause until it expires), whose begin hands the queued lost turn
// back. The lost turn moves in front and runs first; nothing is taken out.
// Its history (versionHandBackQueued) is recorded as
// lost_begin_handed_back_queued (BAE_RECORD_HISTORY=1).
func TestHandedBackQueuedTurnHistory(t *testing.T) {
	ts := testenv.Temporal(t)
	acts := &lostQueuedActs{}
	const queue = "handback-queued"
	ts.NewWorker(queue, func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
		reg := func(fn any, name string) { r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
		reg(acts.BeginTurn, workflows.ActBeginTurn)
		reg(acts.CallProvider, workflows.ActCallProvider)
		reg(acts.FinishIteration, workflows.ActFinishIteration)
		reg(acts.RecordTurnResult, workflows.ActRecordTurnResult)
		reg(acts.FailTurn, workflows.ActFailTurn)
		reg(acts.Cleanup, workflows.ActCleanupSession)
	})
	c := ts.GetDefaultClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sid = "ses_handback_queued"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: sid, TaskQueue: queue}, workflows.SessionWorkflow,
		workflows.SessionParams{SessionID: sid, TurnTimeout: 2 * time.Second})
	require.NoError(t, err)
	signal := func(in workflows.SendMessageInput) {
		require.NoError(t, c.SignalWorkflow(ctx, sid, "", workflows.SignalEnqueue, in))
	}
	signal(workflows.SendMessageInput{TurnID: "r", ClientKeyID: "key_r", Arrived: 1})
	require.Eventually(t, func() bool {
		acts.mu.Lock()
		defer acts.mu.Unlock()
		return slices.Contains(acts.recorded, "r:"+workflows.OutcomePaused)
	}, time.Minute, 20*time.Millisecond, "r paused")
	lost := workflows.AheadTurn{TurnID: "lost", ClientKeyID: "key_a", Arrived: 2}
	acts.mu.Lock()
	acts.lost = &lost // its begin committed in a task this history lost
	acts.mu.Unlock()
	signal(workflows.SendMessageInput{TurnID: lost.TurnID, ClientKeyID: lost.ClientKeyID, Arrived: lost.Arrived})
	signal(workflows.SendMessageInput{TurnID: "front", ClientKeyID: "key_b", Arrived: 3, Front: true})
	require.Eventually(t, func() bool {
		acts.mu.Lock()
		defer acts.mu.Unlock()
		return len(acts.recorded) == 3
	}, time.Minute, 20*time.Millisecond, "every turn recorded")
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: sid, UpdateName: workflows.UpdateClose,
		Args: []any{workflows.CloseInput{State: "closed"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	require.NoError(t, h.Get(ctx, nil))
	require.NoError(t, run.Get(ctx, nil))

	acts.mu.Lock()
	assert.Empty(t, acts.takenOut, "nothing taken out of the conversation")
	assert.Equal(t, []string{"r", "front", "lost", "front"}, acts.begins)
	assert.Equal(t, []string{"r:paused", "lost:completed", "front:completed"}, acts.recorded)
	acts.mu.Unlock()

	markers := 0
	it := c.GetWorkflowHistory(ctx, sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "Version" {
			if string(m.GetDetails()["change-id"].GetPayloads()[0].GetData()) == `"turns-handed-back-queued"` {
				markers++
			}
		}
	}
	assert.Equal(t, 1, markers, "the run records versionHandBackQueued")
	e := &env{srv: &testenv.Server{Temporal: c}}
	recordRun(t, e, sid, "lost_begin_handed_back_queued", "")
}
