package workflows_test

import (
	"time"

	"github.com/bae-go/bae-go/workflows"
)

// A turn whose workflow task was lost after its begin committed is queued
// again in this run (its signal redelivered), and a busy-interrupt turn
// goes to the head of the queue, ahead of it (here both wait behind a
// paused turn until its pause expires). The interrupt's begin hands the
// lost turn back: it is already queued, so it moves in front and runs
// first, and nothing is taken out of the conversation. Before
// versionHandBackQueued the run dropped a handed-back turn it had seen,
// the begin ran again and took the lost turn out, and the lost turn later
// ended superseded, unanswered.
func (s *sessionSuite) TestHandedBackQueuedTurnRunsFirst() {
	r := s.recorded()
	s.acts.pauseFor["key_r"] = true
	lost := workflows.AheadTurn{TurnID: "lost", ClientKeyID: "key_a", Arrived: 2}
	s.signal(time.Second, workflows.SendMessageInput{TurnID: "r", ClientKeyID: "key_r", Arrived: 1})
	s.env.RegisterDelayedCallback(func() {
		s.acts.mu.Lock()
		s.acts.lost = lost // its begin committed in a task this history lost
		s.acts.mu.Unlock()
		s.env.SignalWorkflow(workflows.SignalEnqueue, workflows.SendMessageInput{TurnID: lost.TurnID, ClientKeyID: lost.ClientKeyID, Arrived: lost.Arrived})
		s.env.SignalWorkflow(workflows.SignalEnqueue, workflows.SendMessageInput{TurnID: "front", ClientKeyID: "key_b", Arrived: 3, Front: true})
	}, 2*time.Second)
	s.closeAt(time.Hour)
	s.run()
	s.Empty(s.acts.takenOut, "nothing taken out of the conversation")
	s.Equal([]string{"r", "front", "lost", "front"}, s.turnOrder(), "the interrupt's begin handed the lost turn back; it ran first")
	s.Equal([]string{"r", "lost", "front"}, r.order, "each turn recorded once, the lost one first")
	s.Equal(workflows.OutcomePaused, r.by["r"].Outcome)
	s.Equal(workflows.OutcomeCompleted, r.by["lost"].Outcome)
	s.Equal(workflows.OutcomeCompleted, r.by["front"].Outcome)
}
