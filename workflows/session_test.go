package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/workflows"
)

// fakeActivities scripts the turn activities and records what the workflow
// asked for, in order.
type fakeActivities struct {
	mu     sync.Mutex
	begins []workflows.BeginTurnInput
	at     []time.Duration
	// pauseFor makes the named client's turns pause for a client tool.
	pauseFor map[string]bool
	start    time.Time
	now      func() time.Time
	// withAnswer makes a final answer store the turn's result when the
	// workflow asks (CallProviderInput.Record), kept here.
	withAnswer bool
	stored     []workflows.RecordTurnResultInput
	// lost is a turn PostgreSQL says began and never ended (its workflow
	// task lost): another turn's begin hands it back when asked to, and
	// takes it out of the conversation (takenOut) when not.
	lost     workflows.AheadTurn
	takenOut []string
}

func (f *fakeActivities) BeginTurn(ctx context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.begins = append(f.begins, in)
	f.at = append(f.at, f.now().Sub(f.start))
	switch {
	case f.lost.TurnID == "":
	case f.lost.TurnID == in.TurnID:
		f.lost = workflows.AheadTurn{} // it runs, and ends
	case in.HandBack:
		return workflows.BeginTurnResult{Outcome: workflows.OutcomeHandedBack, Ahead: []workflows.AheadTurn{f.lost}}, nil
	default:
		f.takenOut = append(f.takenOut, f.lost.TurnID)
		f.lost = workflows.AheadTurn{}
	}
	return workflows.BeginTurnResult{Providers: []string{"primary"}}, nil
}

func (f *fakeActivities) CallProvider(ctx context.Context, in workflows.CallProviderInput) (workflows.CallProviderResult, error) {
	if in.Begin != nil {
		return beginThenCall(ctx, in, f.BeginTurn, f.CallProvider)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pauseFor[in.ClientKeyID] && !resumed(f.begins, in.TurnID) {
		return workflows.CallProviderResult{OK: true, ToolCalls: []workflows.ToolCall{{ID: "tu_1", Name: "t", Dispatch: events.DispatchClient}}}, nil
	}
	if f.withAnswer && in.Record != nil {
		rec := *in.Record
		rec.Result.Outcome, rec.Result.Provider = workflows.OutcomeCompleted, in.Provider
		f.stored = append(f.stored, rec)
		return workflows.CallProviderResult{OK: true, Final: true, Recorded: true}, nil
	}
	return workflows.CallProviderResult{OK: true, Final: true}, nil
}

func resumed(begins []workflows.BeginTurnInput, turn string) bool {
	for _, b := range begins {
		if b.TurnID == turn {
			return b.Resume
		}
	}
	return false
}

func (f *fakeActivities) FinishIteration(ctx context.Context, in workflows.FinishIterationInput) (workflows.FinishIterationResult, error) {
	for _, c := range in.Calls {
		if c.Dispatch == events.DispatchClient {
			return workflows.FinishIterationResult{Paused: true}, nil
		}
	}
	return workflows.FinishIterationResult{}, nil
}

func (f *fakeActivities) FailTurn(ctx context.Context, in workflows.FailTurnInput) error { return nil }
func (f *fakeActivities) Cleanup(ctx context.Context, in workflows.CleanupInput) error   { return nil }

type sessionSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env  *testsuite.TestWorkflowEnvironment
	acts *fakeActivities
}

func TestSessionWorkflow(t *testing.T) { suite.Run(t, new(sessionSuite)) }

func (s *sessionSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.acts = &fakeActivities{pauseFor: map[string]bool{}, now: s.env.Now}
	s.acts.start = s.env.Now()
	s.env.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	reg := func(fn any, name string) { s.env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(s.acts.BeginTurn, workflows.ActBeginTurn)
	reg(s.acts.CallProvider, workflows.ActCallProvider)
	reg(s.acts.FinishIteration, workflows.ActFinishIteration)
	reg(s.acts.FailTurn, workflows.ActFailTurn)
	reg(s.acts.Cleanup, workflows.ActCleanupSession)
}

type outcome struct {
	res workflows.TurnResult
	err error
}

// send schedules a SendMessage update after delay and records its outcome.
func (s *sessionSuite) send(delay time.Duration, client, turn string, out map[string]outcome, mu *sync.Mutex) {
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(workflows.UpdateSendMessage, turn, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { mu.Lock(); out[turn] = outcome{err: err}; mu.Unlock() },
			OnComplete: func(v any, err error) {
				mu.Lock()
				defer mu.Unlock()
				r, _ := v.(workflows.TurnResult)
				out[turn] = outcome{res: r, err: err}
			},
		}, workflows.SendMessageInput{TurnID: turn, ClientKeyID: client, Span: "span-" + turn})
	}, delay)
}

func (s *sessionSuite) closeAt(delay time.Duration) {
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(workflows.UpdateClose, "close", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, workflows.CloseInput{State: "closed"})
	}, delay)
}

func (s *sessionSuite) run() {
	s.env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: time.Minute})
	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
}

func (s *sessionSuite) turnOrder() []string {
	var out []string
	for _, b := range s.acts.begins {
		out = append(out, b.TurnID)
	}
	return out
}

func (s *sessionSuite) TestTurnsRunInArrivalOrder() {
	out, mu := map[string]outcome{}, &sync.Mutex{}
	s.send(time.Second, "key_a", "t1", out, mu)
	s.send(time.Second, "key_b", "t2", out, mu)
	s.send(time.Second, "key_a", "t3", out, mu)
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"t1", "t2", "t3"}, s.turnOrder())
	for _, t := range []string{"t1", "t2", "t3"} {
		s.NoError(out[t].err)
		s.Equal(workflows.OutcomeCompleted, out[t].res.Outcome)
	}
}

func (s *sessionSuite) TestPausedTurnKeepsGateUntilTimeout() {
	s.acts.pauseFor["key_a"] = true
	out, mu := map[string]outcome{}, &sync.Mutex{}
	s.send(time.Second, "key_a", "a1", out, mu)
	s.send(2*time.Second, "key_b", "b1", out, mu) // queued behind A's pause
	s.closeAt(time.Hour)
	s.run()
	require.Len(s.T(), s.acts.begins, 2)
	s.Equal(workflows.OutcomePaused, out["a1"].res.Outcome)
	b := s.acts.begins[1]
	s.Equal("b1", b.TurnID)
	s.True(b.Resume)
	s.True(b.Abandon, "B reclaims the gate only by abandoning A's turn")
	s.Equal("key_a", b.AbandonedOwner)
	s.False(out["b1"].res.Resumed, "taking over an abandoned turn is not resuming it")
	s.Empty(out["b1"].res.ResumedSpan)
	s.GreaterOrEqual(s.acts.at[1], time.Minute+time.Second, "B waited for the turn timeout")
	s.Equal(workflows.OutcomeCompleted, out["b1"].res.Outcome)
}

func (s *sessionSuite) TestOwnerResumesAheadOfQueue() {
	s.acts.pauseFor["key_a"] = true
	out, mu := map[string]outcome{}, &sync.Mutex{}
	s.send(time.Second, "key_a", "a1", out, mu)
	s.send(2*time.Second, "key_b", "b1", out, mu)
	s.send(3*time.Second, "key_a", "a2", out, mu) // the continuation
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"a1", "a2", "b1"}, s.turnOrder())
	a2 := s.acts.begins[1]
	s.True(a2.Resume)
	s.False(a2.Abandon)
	s.Equal("span-a2", a2.Span, "activities start their spans under the turn's")
	s.True(out["a2"].res.Resumed)
	s.Equal("span-a1", out["a2"].res.ResumedSpan, "a resume links to the paused turn's span")
	s.False(out["a1"].res.Resumed)
	s.Less(s.acts.at[1], time.Minute, "the owner did not wait for the timeout")
	s.Less(s.acts.at[2], time.Minute, "B ran as soon as A's turn completed")
}

func (s *sessionSuite) TestCloseRejectsQueuedTurns() {
	s.acts.pauseFor["key_a"] = true
	out, mu := map[string]outcome{}, &sync.Mutex{}
	s.send(time.Second, "key_a", "a1", out, mu)
	s.send(2*time.Second, "key_b", "b1", out, mu)
	s.closeAt(10 * time.Second)
	s.run()
	s.Equal([]string{"a1"}, s.turnOrder())
	s.Equal(workflows.OutcomeRejected, out["b1"].res.Outcome)
	s.Equal(workflows.RejectSessionNotOpen, out["b1"].res.Rejection)
	s.Equal("closed", out["b1"].res.Detail)
}

func (s *sessionSuite) TestContinuesAsNewCarryingThePause() {
	s.acts.pauseFor["key_a"] = true
	out, mu := map[string]outcome{}, &sync.Mutex{}
	s.send(time.Second, "key_b", "b1", out, mu)
	s.send(2*time.Second, "key_a", "a1", out, mu) // pauses: turn 2 of 2
	s.env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: time.Minute, TurnsPerRun: 2})
	s.True(s.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &can)
	var next workflows.SessionParams
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Require().NotNil(next.Carry)
	s.Equal(2, next.Carry.Turns)
	s.Require().NotNil(next.Carry.Paused, "the paused turn survives continue-as-new")
	s.Equal("key_a", next.Carry.Paused.Owner)
	s.Equal("a1", next.Carry.Paused.TurnID)
	s.Equal("span-a1", next.Carry.Paused.Span, "and so does its span, for the resume's link")
}
