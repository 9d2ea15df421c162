package workflows_test

import (
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/bae-go/bae-go/workflows"
)

// idleOutcomes records what each SendIdle update came to.
type idleOutcomes struct {
	mu      sync.Mutex
	refused map[string]error
	done    map[string]workflows.TurnResult
}

// sendIdle schedules a SendIdle update after delay.
func (s *sessionSuite) sendIdle(delay time.Duration, in workflows.SendMessageInput, o *idleOutcomes) {
	s.env.RegisterDelayedCallback(func() { s.sendIdleNow(in, o) }, delay)
}

func (s *sessionSuite) sendIdleNow(in workflows.SendMessageInput, o *idleOutcomes) {
	s.sendIdleAs(in.TurnID, in, o)
}

// sendIdleAs sends it under its own update id (one the run has not seen,
// or Temporal answers with that update's outcome).
func (s *sessionSuite) sendIdleAs(updateID string, in workflows.SendMessageInput, o *idleOutcomes) {
	s.env.UpdateWorkflow(workflows.UpdateSendIdle, updateID, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { o.mu.Lock(); o.refused[in.TurnID] = err; o.mu.Unlock() },
		OnComplete: func(v any, err error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			r, _ := v.(workflows.TurnResult)
			o.done[in.TurnID] = r
		},
	}, in)
}

func newIdleOutcomes() *idleOutcomes {
	return &idleOutcomes{refused: map[string]error{}, done: map[string]workflows.TurnResult{}}
}

func (s *sessionSuite) requireBusyRefusal(o *idleOutcomes, turn string) {
	s.T().Helper()
	err := o.refused[turn]
	var ae *temporal.ApplicationError
	s.Require().True(errors.As(err, &ae), "%s refused as busy, got %v", turn, err)
	s.Equal(workflows.ErrSessionBusy, ae.Type())
	_, ran := o.done[turn]
	s.False(ran, "%s did not run", turn)
}

// An idle session takes a turn through SendIdle: it runs at once, returns
// its result and records it as a signalled turn does.
func (s *sessionSuite) TestSendIdleRunsAndRecordsTheTurn() {
	r := s.recorded()
	o := newIdleOutcomes()
	s.sendIdle(time.Second, workflows.SendMessageInput{TurnID: "t1", ClientKeyID: "key_a"}, o)
	s.sendIdle(2*time.Second, workflows.SendMessageInput{TurnID: "t2", ClientKeyID: "key_a"}, o)
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"t1", "t2"}, s.turnOrder())
	s.Empty(o.refused)
	for _, id := range []string{"t1", "t2"} {
		s.Equal(workflows.OutcomeCompleted, o.done[id].Outcome, id)
		s.Equal(workflows.OutcomeCompleted, r.by[id].Outcome, id)
	}
}

// While an admitted turn holds the gate, SendIdle refuses (so at most one
// is in flight) and a turn sent instead as a signal queues behind it; the
// paused turn's owner passes, as it passes the queue; a turn id the run
// has seen goes through the queue, which drops it.
func (s *sessionSuite) TestSendIdleRefusesABusySession() {
	r := s.recorded()
	s.acts.pauseFor["key_a"] = true
	o := newIdleOutcomes()
	b1 := workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"}
	c1 := workflows.SendMessageInput{TurnID: "c1", ClientKeyID: "key_c"}
	s.env.RegisterDelayedCallback(func() {
		// Two in the same instant: the first takes the gate before the
		// second is validated.
		s.sendIdleNow(workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a"}, o)
		s.sendIdleNow(c1, o)
	}, time.Second)
	s.sendIdle(2*time.Second, b1, o)                                                             // a1 paused: another driver waits
	s.signal(3*time.Second, b1)                                                                  // so it queues
	s.sendIdle(4*time.Second, c1, o)                                                             // b1 queued ahead of it
	s.signal(5*time.Second, c1)                                                                  // behind b1
	s.sendIdle(6*time.Second, workflows.SendMessageInput{TurnID: "a2", ClientKeyID: "key_a"}, o) // the owner resumes
	s.env.RegisterDelayedCallback(func() {                                                       // seen
		s.sendIdleAs("a2-again", workflows.SendMessageInput{TurnID: "a2", ClientKeyID: "key_a"}, o)
	}, 7*time.Hour)
	s.closeAt(8 * time.Hour)
	s.run()
	s.requireBusyRefusal(o, "b1")
	s.requireBusyRefusal(o, "c1")
	s.Equal([]string{"a1", "a2", "b1", "c1"}, s.turnOrder())
	s.Equal(workflows.OutcomePaused, o.done["a1"].Outcome)
	s.True(o.done["a2"].Resumed)
	s.Equal(workflows.OutcomeCompleted, r.by["c1"].Outcome)
	s.Len(r.order, 4, "each turn recorded once")
	var ae *temporal.ApplicationError
	s.Require().ErrorAs(o.refused["a2"], &ae, "a turn id seen before is refused")
}

// A turn whose final answer stored its result (versionResultWithAppend)
// runs no RecordTurnResult; a paused one still does, and the resume's
// stored result carries what the workflow adds (Resumed, its span).
func (s *sessionSuite) TestResultStoredWithTheAnswer() {
	r := s.recorded()
	s.acts.withAnswer = true
	s.acts.pauseFor["key_a"] = true
	o := newIdleOutcomes()
	s.sendIdle(time.Second, workflows.SendMessageInput{TurnID: "b1", ClientKeyID: "key_b"}, o)
	s.signal(2*time.Second, workflows.SendMessageInput{TurnID: "a1", ClientKeyID: "key_a", Span: "span-a1"})
	s.signal(3*time.Second, workflows.SendMessageInput{TurnID: "a2", ClientKeyID: "key_a"})
	s.closeAt(time.Hour)
	s.run()
	s.Equal([]string{"b1", "a1", "a2"}, s.turnOrder())
	s.Equal([]string{"a1"}, r.order, "only the paused turn recorded on its own")
	s.Require().Len(s.acts.stored, 2)
	s.Equal("b1", s.acts.stored[0].TurnID)
	s.Equal("a2", s.acts.stored[1].TurnID)
	s.True(s.acts.stored[1].Result.Resumed)
	s.Equal("span-a1", s.acts.stored[1].Result.ResumedSpan)
	s.Equal(workflows.OutcomeCompleted, o.done["b1"].Outcome)
}
