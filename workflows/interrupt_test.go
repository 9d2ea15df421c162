package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/workflows"
)

// stopFirstAttempt fails the turn's first attempt as a provider call an
// interrupt's stop message ended.
func stopFirstAttempt(s *scripted) func(in workflows.CallProviderInput) error {
	return func(in workflows.CallProviderInput) error {
		s.mu.Lock()
		n := len(s.inputs)
		s.mu.Unlock()
		if n == 1 {
			return temporal.NewNonRetryableApplicationError("stopped", workflows.ErrAttemptStopped, nil)
		}
		return nil
	}
}

// runStoppedTurn runs one turn whose first attempt is stopped, with an
// Interrupt update interruptAfter the turn began (0: none), and returns
// the turn's and the interrupt's results.
func runStoppedTurn(t *testing.T, s *scripted, interruptAfter time.Duration) (workflows.TurnResult, *workflows.InterruptResult) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(s.BeginTurn, workflows.ActBeginTurn)
	reg(s.CallProvider, workflows.ActCallProvider)
	reg(s.FinishIteration, workflows.ActFinishIteration)
	reg(s.FailTurn, workflows.ActFailTurn)
	reg(s.Cleanup, workflows.ActCleanupSession)
	reg(func(_ context.Context, in workflows.InterruptTurnInput) (workflows.InterruptTurnResult, error) {
		s.record("InterruptTurn by=%s", in.By)
		return workflows.InterruptTurnResult{LastSeq: 9}, nil
	}, workflows.ActInterruptTurn)
	env.OnUpsertMemo(mock.Anything).Return(nil)

	var (
		res  workflows.TurnResult
		ires *workflows.InterruptResult
		done bool
	)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateSendMessage, "t1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
			OnComplete: func(v any, err error) {
				assert.NoError(t, err)
				res, _ = v.(workflows.TurnResult)
				done = true
			},
		}, workflows.SendMessageInput{TurnID: "t1", ClientKeyID: "key_a"})
	}, time.Second)
	if interruptAfter > 0 {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(workflows.UpdateInterrupt, "i1", &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { t.Errorf("interrupt rejected: %v", err) },
				OnComplete: func(v any, err error) {
					assert.NoError(t, err)
					r, _ := v.(workflows.InterruptResult)
					ires = &r
				},
			}, workflows.InterruptInput{By: "key_a"})
		}, time.Second+interruptAfter)
	}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateClose, "close", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, workflows.CloseInput{State: "closed", Reason: "session_close"})
	}, time.Hour)
	env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: time.Minute})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.True(t, done, "the turn finished")
	return res, ires
}

// TestStoppedAttemptWaitsForTheInterrupt: a provider call stopped by an
// interrupt's stop message is neither retried nor followed by the
// fallback; the turn waits for the Interrupt update, which closes it.
func TestStoppedAttemptWaitsForTheInterrupt(t *testing.T) {
	s := &scripted{begin: primary(), provider: final}
	s.attemptErr = stopFirstAttempt(s)
	res, ires := runStoppedTurn(t, s, 3*time.Second)
	assert.Equal(t, workflows.OutcomeInterrupted, res.Outcome)
	require.NotNil(t, ires)
	assert.Equal(t, workflows.InterruptResult{Interrupted: true, TurnID: "t1"}, *ires)
	assert.Equal(t, []string{"BeginTurn", "CallProvider i0 a0 primary", "InterruptTurn by=key_a", "CleanupSession session_close"}, s.calls)
	require.Len(t, s.inputs, 1)
	assert.True(t, s.inputs[0].Stoppable, "the workflow expects stops")
}

// TestStopWithoutInterruptCallsAgain: a stop no Interrupt update follows
// (its sender died between the two) is void: after the wait the attempt
// runs again and the turn completes.
func TestStopWithoutInterruptCallsAgain(t *testing.T) {
	s := &scripted{begin: primary(), provider: final}
	s.attemptErr = stopFirstAttempt(s)
	res, ires := runStoppedTurn(t, s, 0)
	assert.Equal(t, workflows.OutcomeCompleted, res.Outcome)
	assert.Nil(t, ires)
	assert.Equal(t, []string{"BeginTurn", "CallProvider i0 a0 primary", "BeginTurn", "CallProvider i0 a0 primary", "CleanupSession session_close"}, s.calls)
}
