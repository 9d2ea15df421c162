package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// versionInterrupt: a turn runs under a cancellable context that the
// Interrupt update cancels; the interrupted turn is closed by
// InterruptTurn. Histories recorded before it run turns that cannot be
// interrupted.
const (
	changeInterrupt  = "turn-interrupt"
	versionInterrupt = 1
)

// versionStopCall: an interrupt may stop a turn's running provider call
// from outside the workflow (CallProviderInput.Stoppable, see runAttempt);
// the stopped attempt waits for the Interrupt update on a timer.
const (
	changeStopCall  = "turn-stop-call"
	versionStopCall = 1
)

// UpdateInterrupt stops the running (or paused) turn.
const UpdateInterrupt = "Interrupt"

// OutcomeInterrupted: a driver or an operator stopped the turn; what it had
// produced is kept, its open tool calls are closed with error results.
const OutcomeInterrupted = "interrupted"

// InterruptInput is the Interrupt update argument.
type InterruptInput struct {
	// TurnID limits the interrupt to that turn; "" interrupts whichever
	// turn is running, or else the paused one.
	TurnID string `json:",omitempty"`
	// By is the interrupting driver's client key id, or
	// events.InterruptedBy for an operator.
	By string
	// RunningOnly leaves a paused turn alone (a sendMessage with the
	// interrupt busy policy: its sender may be resuming that turn).
	RunningOnly bool `json:",omitempty"`
}

// InterruptResult is the Interrupt update result.
type InterruptResult struct {
	// Interrupted is set when this or an earlier interrupt ended TurnID.
	Interrupted bool
	// TurnID is the turn the interrupt reached ("" when none was running
	// or paused, or the named one was neither).
	TurnID string `json:",omitempty"`
	// Outcome is the turn's outcome when it ended on its own before the
	// interrupt reached it (Interrupted false).
	Outcome string `json:",omitempty"`
}

// liveTurn is the running turn an interrupt can reach.
type liveTurn struct {
	turnID      string
	cancel      workflow.CancelFunc
	interrupted bool
	by          string
	done        bool
	result      InterruptResult
}

// interrupt is the Interrupt update handler. A running turn's context is
// cancelled and the handler returns once the turn ended (its last event
// stored); a paused turn is closed here, holding the gate meanwhile.
func (s *session) interrupt(ctx workflow.Context, in InterruptInput) (InterruptResult, error) {
	if lt := s.live; lt != nil && (in.TurnID == "" || in.TurnID == lt.turnID) {
		if !lt.interrupted {
			lt.interrupted, lt.by = true, in.By
			lt.cancel()
		}
		if err := workflow.Await(ctx, func() bool { return lt.done }); err != nil {
			return InterruptResult{}, err
		}
		return lt.result, nil
	}
	p := s.paused
	if p == nil || s.busy || in.RunningOnly || (in.TurnID != "" && in.TurnID != p.TurnID) {
		return InterruptResult{}, nil
	}
	s.busy = true
	defer func() { s.busy = false }()
	s.unpause()
	o := s.turnOptions()
	ref := TurnRef{SessionID: s.p.SessionID, TurnID: p.TurnID, ClientKeyID: p.Owner, Span: p.Span}
	r, err := interruptTurn.runLocal(dbCtx(ctx, o), InterruptTurnInput{TurnRef: ref, By: in.By, Paused: true})
	if err != nil {
		return InterruptResult{}, err
	}
	if r.NotPaused {
		// Resumed or abandoned first (PostgreSQL says so): nothing stopped.
		return InterruptResult{}, nil
	}
	return InterruptResult{Interrupted: true, TurnID: p.TurnID}, nil
}

// runLive runs a turn that an interrupt can reach (versionInterrupt): under
// a context the Interrupt update cancels. An interrupted turn is closed by
// InterruptTurn on a disconnected context; a turn that ended on its own
// before the interrupt reached it keeps its outcome.
func (s *session) runLive(ctx workflow.Context, begin BeginTurnInput, o turnOptions, launch launchFn) (turnResult, error) {
	if !o.interruptible {
		return runTurn(ctx, begin, o, launch)
	}
	tctx, cancel := workflow.WithCancel(ctx)
	lt := &liveTurn{turnID: begin.TurnID, cancel: cancel}
	s.live = lt
	defer func() {
		s.live = nil
		lt.done = true
	}()
	res, err := runTurn(tctx, begin, o, launch)
	cancel()
	if !lt.interrupted || (err == nil && res.Outcome != OutcomePaused) {
		lt.result = InterruptResult{TurnID: begin.TurnID, Outcome: res.Outcome}
		return res, err
	}
	// Interrupted: whatever the turn's steps answered (cancelled, or a
	// pause that came first), the turn ends here.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	b := begin
	r, ierr := interruptTurn.runLocal(dbCtx(dctx, o), InterruptTurnInput{TurnRef: begin.TurnRef, By: lt.by, Begin: &b})
	if ierr != nil {
		return turnResult{}, ierr
	}
	if r.Begin != nil && r.Begin.Outcome != "" {
		// The turn never began (rejected at its begin): that is its outcome.
		lt.result = InterruptResult{TurnID: begin.TurnID, Outcome: r.Begin.Outcome}
		return turnResult{TurnResult: TurnResult{Outcome: r.Begin.Outcome, Rejection: r.Begin.Rejection, Detail: r.Begin.Detail}, sessionEnded: r.Begin.SessionEnded}, nil
	}
	if r.Outcome != "" {
		// It had stored its final answer before the interrupt reached it.
		lt.result = InterruptResult{TurnID: begin.TurnID, Outcome: r.Outcome}
		return turnResult{TurnResult: TurnResult{Outcome: r.Outcome, LastSeq: r.LastSeq}}, nil
	}
	lt.result = InterruptResult{Interrupted: true, TurnID: begin.TurnID}
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeInterrupted, LastSeq: r.LastSeq}}, nil
}
