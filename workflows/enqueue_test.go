package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/workflows"
)

// results records what RecordTurnResult was asked to store. A turn's
// result is recorded while the next turn may already run, so their order
// is not the turns' order.
type results struct {
	mu    sync.Mutex
	order []string
	by    map[string]workflows.TurnResult
}

func (r *results) record(_ context.Context, in workflows.RecordTurnResultInput) (workflows.TurnResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, in.TurnID)
	r.by[in.TurnID] = in.Result
	return in.Result, nil
}

func (s *sessionSuite) recorded() *results {
	r := &results{by: map[string]workflows.TurnResult{}}
	s.env.RegisterActivityWithOptions(r.record, activity.RegisterOptions{Name: workflows.ActRecordTurnResult})
	return r
}

// signal schedules an Enqueue signal after delay.
func (s *sessionSuite) signal(delay time.Duration, in workflows.SendMessageInput) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalEnqueue, in)
	}, delay)
}

// More drivers than a stock cluster lets Updates wait (10) all run, in
// the order their signals arrived, each with its result recorded.
func (s *sessionSuite) TestSignalledTurnsRunInArrivalOrder() {
	r := s.recorded()
	var want []string
	for i := range 60 {
		id := fmt.Sprintf("t%02d", i)
		want = append(want, id)
		s.signal(time.Second+time.Duration(i)*50*time.Millisecond, workflows.SendMessageInput{TurnID: id, ClientKeyID: fmt.Sprintf("key_%d", i)})
	}
	s.closeAt(time.Hour)
	s.run()
	s.Equal(want, s.turnOrder())
	s.ElementsMatch(want, r.order)
	for _, id := range want {
		s.Equal(workflows.OutcomeCompleted, r.by[id].Outcome, id)
	}
}

// A turn sent again (the orphan sweep, a resend) while queued or after it
// ran is not run twice.
func (s *sessionSuite) TestSignalledTurnRunsOnce() {
	r := s.recorded()
	s.acts.pauseFor["key_a"] = true
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"}) // pauses
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"})
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"}) // queued
	s.signal(4*time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"}) // ran
	s.signal(5*time.Second, workflows.SendMessageInput{TurnID: "a2", ClientKeyID: "key_a"})
	s.closeAt(time.Hour)
	// The pause outlasts the test: b1 runs only after a2 resumed it.
	s.env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: 2 * time.Hour})
	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
	s.Equal([]string{"a1", "a2", "b1"}, s.turnOrder())
	s.ElementsMatch([]string{"a1", "a2", "b1"}, r.order)
	s.Equal(workflows.OutcomePaused, r.by["a1"].Outcome)
	s.True(r.by["a2"].Resumed, "the owner's next message resumed its paused turn ahead of the queue")
}

// A turn sent with the interrupt busy policy goes ahead of those waiting.
func (s *sessionSuite) TestFrontTurnJumpsTheQueue() {
	r := s.recorded()
	s.acts.pauseFor["key_a"] = true
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"}) // pauses
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"})
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "c1", ClientKeyID: "key_c", Front: true})
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"a1", "c1", "b1"}, s.turnOrder())
	s.Len(r.order, 3)
}

// Closing the session answers every queued turn with a recorded refusal.
func (s *sessionSuite) TestCloseRecordsRefusalOfQueuedTurns() {
	r := s.recorded()
	s.acts.pauseFor["key_a"] = true
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"})
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"})
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "b2", ClientKeyID: "key_b"})
	s.closeAt(10 * time.Second)
	s.run()
	s.Equal([]string{"a1"}, s.turnOrder())
	s.ElementsMatch([]string{"a1", "b1", "b2"}, r.order)
	for _, id := range []string{"b1", "b2"} {
		s.Equal(workflows.OutcomeRejected, r.by[id].Outcome)
		s.Equal(workflows.RejectSessionNotOpen, r.by[id].Rejection)
		s.Equal("closed", r.by[id].Detail)
	}
}

// A run that reached its turn limit with turns still waiting continues as
// new with them, in order, and the next run runs them.
func (s *sessionSuite) TestContinueAsNewCarriesTheQueue() {
	s.recorded()
	s.acts.pauseFor["key_a"] = true
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"})   // pauses: turn 1 of 2
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "c1", ClientKeyID: "key_c"}) // abandons it after the timeout: turn 2
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b", Span: "span-b1"})
	s.signal(4*time.Second, workflows.SendMessageInput{TurnID: "d1", ClientKeyID: "key_d"})
	s.env.ExecuteWorkflow(workflows.SessionWorkflow, workflows.SessionParams{SessionID: "ses_1", TurnTimeout: time.Minute, TurnsPerRun: 2})
	s.True(s.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &can)
	s.Equal([]string{"a1", "c1"}, s.turnOrder())
	var next workflows.SessionParams
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Require().NotNil(next.Carry)
	s.Equal([]workflows.SendMessageInput{{TurnID: "b1", ClientKeyID: "key_b", Span: "span-b1"}, {TurnID: "d1", ClientKeyID: "key_d"}}, next.Carry.Queue)

	// The next run takes them in the same order.
	next.TurnsPerRun = 10
	s.SetupTest()
	r := s.recorded()
	s.closeAt(time.Hour)
	s.env.ExecuteWorkflow(workflows.SessionWorkflow, next)
	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
	s.Equal([]string{"b1", "d1"}, s.turnOrder())
	s.ElementsMatch([]string{"b1", "d1"}, r.order)
}

// A signal that comes late (its server died before sending it) takes its
// place by arrival among the signalled turns still waiting, never ahead of
// a turn put at the head.
func (s *sessionSuite) TestLateSignalKeepsItsArrivalPlace() {
	s.recorded()
	s.acts.pauseFor["key_a"] = true
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"}) // pauses: the others wait
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b", Arrived: 100})
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "c1", ClientKeyID: "key_c", Arrived: 300})
	s.signal(4*time.Second, workflows.SendMessageInput{TurnID: "d1", ClientKeyID: "key_d", Arrived: 200}) // late
	s.signal(5*time.Second, workflows.SendMessageInput{TurnID: "e1", ClientKeyID: "key_e", Arrived: 400, Front: true})
	s.signal(6*time.Second, workflows.SendMessageInput{TurnID: "f1", ClientKeyID: "key_f", Arrived: 10}) // late, behind the head
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"a1", "e1", "f1", "b1", "d1", "c1"}, s.turnOrder())
}
