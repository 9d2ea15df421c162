package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// UpdateSendIdle admits a stored message's turn when the session is idle:
// the common case (one driver, a person typing) as one Update, whose
// workflow task is written to history only when it ends, instead of a
// signal whose workflow task is persisted twice on its way. Its validator
// refuses unless the turn would take the gate at once, so a refused
// Update (never written to history) costs one round trip, at most one is
// in flight per session (the first one accepted marks the session busy
// before the next is validated), and the in-flight cap on Updates is
// never approached. A refused turn goes to the Enqueue signal queue, as
// every turn did before.
const UpdateSendIdle = "SendIdle"

// ErrSessionBusy is the type of the SendIdle validator's refusal: the
// turn would wait, and is to be sent as an Enqueue signal.
const ErrSessionBusy = "SessionBusy"

// validateIdle accepts a turn only when it would pass awaitGate now with
// nothing ahead of it: no turn running, queued or still in the signal
// channel (taken from it later in this same task, and arrived before),
// no live pause of another driver, no continue-as-new due, and a turn id
// this run has not seen (a resubmission goes through the queue, which
// drops it).
func (s *session) validateIdle(ctx workflow.Context, in SendMessageInput) error {
	if in.TurnID == "" || in.ClientKeyID == "" {
		return temporal.NewNonRetryableApplicationError("turn id and client key id are required", ErrSessionBusy, nil)
	}
	if !s.gateFree(ctx, in) {
		return temporal.NewNonRetryableApplicationError("the session is busy", ErrSessionBusy, nil)
	}
	return nil
}

// gateFree is awaitGate's condition for a turn that is not in the queue,
// with the queue and the signal channel empty (or the turn the paused
// turn's owner's, which passes the queue as in awaitGate).
func (s *session) gateFree(ctx workflow.Context, in SendMessageInput) bool {
	if s.closed || s.busy || s.seen[in.TurnID] || s.signals.Len() > 0 || s.rolloverDue(ctx) {
		return false
	}
	if s.paused != nil {
		if s.paused.Owner == in.ClientKeyID {
			return true
		}
		if !s.paused.Expired {
			return false
		}
	}
	return len(s.queue) == 0
}

// sendIdle is the SendIdle handler: it takes the gate in the step that
// accepted it (runAndRecord marks the session busy before yielding), runs
// the turn, records its result as a signalled turn does (resends, the
// queue caps and other replicas read it there) and returns it.
//
// A turn whose begin handed turns back waits behind them, then runs again.
func (s *session) sendIdle(ctx workflow.Context, in SendMessageInput) (TurnResult, error) {
	s.seen[in.TurnID] = true
	started := workflow.Now(ctx)
	res, ahead := s.runAndRecord(ctx, in, started)
	for len(ahead) > 0 {
		ticket := s.handBack(ctx, in, false, ahead)
		err := s.awaitGate(ctx, in, ticket, false)
		s.dequeue(ticket)
		if err != nil {
			return TurnResult{}, err
		}
		res, ahead = s.runAndRecord(ctx, in, started)
	}
	return res, nil
}
