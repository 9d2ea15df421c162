package workflows

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// versionObservability: failed provider attempts are failed activities and
// the memo carries the profile's name and the last error. Histories
// recorded before it replay without either.
const (
	changeObservability  = "observability"
	versionObservability = 1
)

// versionLocalProvider: provider attempts run as local activities, inside
// the workflow task that began the turn (a text turn is one workflow task).
// Histories recorded before it schedule an activity per attempt.
const (
	changeLocalProvider  = "provider-local-activity"
	versionLocalProvider = 1
)

// versionBeginInAttempt: BeginTurn runs inside the turn's first provider
// attempt, one local activity instead of two. Histories recorded before it
// run BeginTurn on its own.
const (
	changeBeginInAttempt  = "begin-in-first-attempt"
	versionBeginInAttempt = 1
)

// versionCompaction: provider attempts send a view bounded by the
// provider's budget; a view that needs a summary, or a too-long refusal,
// runs CompactContext and retries the attempt; a turn that cannot fit ends
// turn_failed with the session open. Histories recorded before it send the
// whole conversation.
const (
	changeCompaction  = "context-compaction"
	versionCompaction = 1

	// versionBudgets: every provider attempt reads its budgets first, and
	// a spent one fails the turn (StepBudget) with the session still open.
	changeBudgets  = "budgets"
	versionBudgets = 1

	// versionResultWithAppend: a turn that ends with a final answer
	// stores its result in the answer's transaction (CallProviderInput.
	// Record) instead of a RecordTurnResult local activity of its own.
	// Histories recorded before it run RecordTurnResult for every turn.
	changeResultWithAppend  = "result-with-append"
	versionResultWithAppend = 1
)

// defaultTurnsPerRun bounds history growth; the workflow continues as new
// after this many turns (well under Temporal's per-run update limit).
const defaultTurnsPerRun = 200

// session is the workflow's control state. All fields are mutated only by
// workflow code, so they replay deterministically.
type session struct {
	p          SessionParams
	closed     bool
	endState   string
	cleaned    bool
	busy       bool
	nextTicket int64
	queue      []queuedTurn
	paused     *PausedTurn
	cancelTimr workflow.CancelFunc
	turns      int
	runTurns   int
	// subagents are the running remote subagent coroutines, by id.
	subagents map[string]workflow.CancelFunc
	// memoProfile is the profile name this run last put in the memo.
	memoProfile string
	// live is the running turn an interrupt can reach (see interrupt.go).
	live *liveTurn
	// running is the turn holding the gate ("" when none).
	running string
	// rewinding counts the Rewind updates holding the gate (see rewind.go).
	rewinding int
	// signals is the queue's signal channel; seen, pending and recording
	// account for the signalled turns (see enqueue.go).
	signals      workflow.ReceiveChannel
	seen         map[string]bool
	pending      int
	recording    int
	recordingIDs []string
	// limit is the turns per run before continue-as-new.
	limit int
	// approvals are the running turn's held calls still pending, by
	// approval id (see approvals.go).
	approvals map[string]*pendingApproval
	// steps reports the running turn's step (versionTurnStep); nil until
	// a turn of a run that records the version.
	steps *stepper
	// ended are the last signalled or SendIdle turns that ended, oldest
	// first, carried to the next run (Carry.Ended).
	ended []string
}

// carriedEnded bounds Carry.Ended: more than the turns a signal can name
// as ahead of it (store's maxAhead).
const carriedEnded = 32

// queuedTurn is a turn waiting for the gate: its ticket orders the queue.
type queuedTurn struct {
	ticket    int64
	in        SendMessageInput
	signalled bool
}

// Session is the workflow function registered as "Session".
func Session(ctx workflow.Context, p SessionParams) error {
	s := &session{p: p, subagents: map[string]workflow.CancelFunc{}, seen: map[string]bool{}, approvals: map[string]*pendingApproval{}}
	s.signals = workflow.GetSignalChannel(ctx, SignalEnqueue)
	// Set before any handler is registered: SendIdle's validator reads it.
	s.limit = p.TurnsPerRun
	if s.limit <= 0 {
		s.limit = defaultTurnsPerRun
	}
	if p.Carry != nil {
		for _, id := range p.Carry.Ended {
			s.seen[id] = true
		}
		s.ended = p.Carry.Ended
		s.turns = p.Carry.Turns
		if p.Carry.Paused != nil {
			s.pause(ctx, *p.Carry.Paused)
		}
		for _, in := range p.Carry.Queue {
			s.admit(ctx, in)
		}
	}
	workflow.Go(ctx, s.receiveTurns)
	if err := workflow.SetQueryHandler(ctx, QueryControl, s.view); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSendMessage, s.sendMessage, workflow.UpdateHandlerOptions{
		Validator: func(ctx workflow.Context, in SendMessageInput) error {
			if in.TurnID == "" || in.ClientKeyID == "" {
				return errors.New("turn id and client key id are required")
			}
			return nil
		},
	}); err != nil {
		return fmt.Errorf("register send update: %w", err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSendIdle, s.sendIdle, workflow.UpdateHandlerOptions{Validator: s.validateIdle}); err != nil {
		return fmt.Errorf("register send-idle update: %w", err)
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateClose, s.close); err != nil {
		return fmt.Errorf("register close update: %w", err)
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateCancelSubagent, s.cancelSubagent); err != nil {
		return fmt.Errorf("register cancel update: %w", err)
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateInterrupt, s.interrupt); err != nil {
		return fmt.Errorf("register interrupt update: %w", err)
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateRewind, s.rewind); err != nil {
		return fmt.Errorf("register rewind update: %w", err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateDecideApproval, s.decideApproval, workflow.UpdateHandlerOptions{
		Validator: func(ctx workflow.Context, in ApprovalDecisionInput) error { return s.approvalValidation(in) },
	}); err != nil {
		return fmt.Errorf("register approval update: %w", err)
	}

	// Signalled turns still queued are carried to the next run; one that
	// holds the gate, or is recording its result, is not, and neither is
	// a signal not yet taken from the channel.
	err := workflow.Await(ctx, func() bool {
		if s.signals.Len() > 0 {
			return false
		}
		if s.closed && s.cleaned {
			return len(s.subagents) == 0 && s.pending == 0 && workflow.AllHandlersFinished(ctx)
		}
		return s.rolloverDue(ctx) && !s.busy && s.recording == 0
	})
	if err != nil {
		return err
	}
	if s.closed {
		return nil
	}
	next := p
	next.Carry = &Carry{Paused: s.paused, Turns: s.turns, Queue: s.carriedQueue(), Ended: s.ended}
	return workflow.NewContinueAsNewError(ctx, Session, next)
}

// rolloverDue reports that the run has done its share of turns (or
// Temporal suggests a new run) and nothing but a running turn keeps it
// from continuing as new.
func (s *session) rolloverDue(ctx workflow.Context) bool {
	return (s.runTurns >= s.limit || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) && len(s.subagents) == 0 && workflow.AllHandlersFinished(ctx)
}

func (s *session) view() (ControlView, error) {
	v := ControlView{Busy: s.busy, Queued: len(s.queue), Paused: s.paused, Closed: s.closed, Turns: s.turns, Running: s.running}
	for _, q := range s.queue {
		v.QueuedTurns = append(v.QueuedTurns, q.in.TurnID)
	}
	v.Recording = append(v.Recording, s.recordingIDs...)
	return v, nil
}

// sendMessage is the SendMessage update handler, kept for servers that
// submit turns as Updates (before the Enqueue signal). Updates are accepted
// in arrival order and each takes a ticket, so the queue is FIFO.
func (s *session) sendMessage(ctx workflow.Context, in SendMessageInput) (TurnResult, error) {
	ticket := s.enqueue(in, false)
	defer func() { s.dequeue(ticket) }()
	for {
		if err := s.awaitGate(ctx, in, ticket, false); err != nil {
			return TurnResult{}, err
		}
		if s.closed {
			return TurnResult{Outcome: OutcomeRejected, Rejection: RejectSessionNotOpen, Detail: s.endState}, nil
		}
		s.dequeue(ticket)
		res, _, ahead, err := s.runGated(ctx, in, false, time.Time{})
		if err != nil || len(ahead) == 0 {
			return res, err
		}
		ticket = s.handBack(ctx, in, false, ahead)
	}
}

// enqueue gives a turn the next ticket, at the tail of the queue, or at
// its head for a turn that replaces the running one. A signalled turn goes
// ahead of the signalled turns waiting at the tail that arrived after it
// (never ahead of an Update's turn or one put at the head), so a late
// signal keeps its place.
func (s *session) enqueue(in SendMessageInput, signalled bool) int64 {
	ticket := s.nextTicket
	s.nextTicket++
	q := queuedTurn{ticket: ticket, in: in, signalled: signalled}
	if signalled && in.Front {
		s.queue = append([]queuedTurn{q}, s.queue...)
		return ticket
	}
	i := len(s.queue)
	for signalled && in.Arrived > 0 && i > 0 {
		p := s.queue[i-1]
		if !p.signalled || p.in.Front || p.in.Arrived == 0 || p.in.Arrived <= in.Arrived {
			break
		}
		i--
	}
	s.queue = slices.Insert(s.queue, i, q)
	return ticket
}

// awaitGate waits until the turn may run, or the session closed. The owner
// of a paused turn bypasses the queue (the gate is still theirs); everyone
// else waits for the head of the queue, a free gate and no live pause. A
// signalled turn also waits while the run is due to continue as new, so
// the run rolls over between turns and carries it.
func (s *session) awaitGate(ctx workflow.Context, in SendMessageInput, ticket int64, signalled bool) error {
	return workflow.Await(ctx, func() bool {
		if s.closed {
			return true
		}
		if s.busy || s.rewinding > 0 || (signalled && s.rolloverDue(ctx)) {
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
		return s.queue[0].ticket == ticket
	})
}

// runGated runs one turn that holds the gate: it marks the session busy,
// resumes or abandons a paused turn, runs the turn and applies its outcome
// to the session (pause, or end on a session-ending failure). record says
// the caller records the result (the turn started then): the turn's final
// answer may store it instead, which recorded reports.
//
// A turn whose begin handed turns back (OutcomeHandedBack) returns them as
// ahead, for the caller to wait behind them (handBack) and run it again.
func (s *session) runGated(ctx workflow.Context, in SendMessageInput, record bool, started time.Time) (res TurnResult, recorded bool, ahead []AheadTurn, err error) {
	s.busy, s.running = true, in.TurnID
	defer func() { s.busy, s.running = false, "" }()

	begin := BeginTurnInput{TurnRef: TurnRef{SessionID: s.p.SessionID, TurnID: in.TurnID, ClientKeyID: in.ClientKeyID, Span: in.Span}}
	var resumedSpan string
	resumed := false
	if s.paused != nil {
		begin.Resume = true
		if s.paused.Owner != in.ClientKeyID {
			begin.Abandon = true
			begin.AbandonedOwner = s.paused.Owner
		} else {
			resumed, resumedSpan = true, s.paused.Span
		}
		s.unpause()
	}
	s.turns++
	s.runTurns++
	o := s.turnOptions()
	o.observable = workflow.GetVersion(ctx, changeObservability, workflow.DefaultVersion, versionObservability) >= versionObservability
	o.localProvider = workflow.GetVersion(ctx, changeLocalProvider, workflow.DefaultVersion, versionLocalProvider) >= versionLocalProvider
	o.beginInAttempt = o.localProvider && workflow.GetVersion(ctx, changeBeginInAttempt, workflow.DefaultVersion, versionBeginInAttempt) >= versionBeginInAttempt
	o.compaction = workflow.GetVersion(ctx, changeCompaction, workflow.DefaultVersion, versionCompaction) >= versionCompaction
	o.interruptible = workflow.GetVersion(ctx, changeInterrupt, workflow.DefaultVersion, versionInterrupt) >= versionInterrupt
	o.stoppable = o.interruptible && o.localProvider && workflow.GetVersion(ctx, changeStopCall, workflow.DefaultVersion, versionStopCall) >= versionStopCall
	o.budgets = workflow.GetVersion(ctx, changeBudgets, workflow.DefaultVersion, versionBudgets) >= versionBudgets
	if record && workflow.GetVersion(ctx, changeResultWithAppend, workflow.DefaultVersion, versionResultWithAppend) >= versionResultWithAppend {
		o.record = &RecordTurnResultInput{SessionID: s.p.SessionID, TurnID: in.TurnID, In: in, Started: started,
			Result: TurnResult{Resumed: resumed, ResumedSpan: resumedSpan}}
	}
	if workflow.GetVersion(ctx, changeApprovals, workflow.DefaultVersion, versionApprovals) >= versionApprovals {
		o.gate = &approvalGate{s: s}
	}
	if workflow.GetVersion(ctx, changeTurnStep, workflow.DefaultVersion, versionTurnStep) >= versionTurnStep {
		if s.steps == nil {
			s.steps = newStepper(ctx, s)
		}
		o.step = s.steps
		o.step.localCalls = o.localProvider
		defer o.step.forget()
	}
	if workflow.GetVersion(ctx, changeHandBack, workflow.DefaultVersion, versionHandBack) >= versionHandBack {
		o.unseen = s.unseen
	}
	lres, err := s.runLive(ctx, begin, o, func(l SubagentLaunch) { s.launch(ctx, l) })
	if err != nil {
		return TurnResult{}, false, nil, err
	}
	if lres.Outcome == OutcomeHandedBack {
		// Nothing of the turn was stored: it runs again, after them.
		s.turns--
		s.runTurns--
		return lres.TurnResult, false, lres.ahead, nil
	}
	res, recorded = lres.TurnResult, lres.recorded
	res.Resumed, res.ResumedSpan = resumed, resumedSpan
	if o.observable && o.step == nil {
		if memo := s.turnMemo(in.TurnID, lres); len(memo) > 0 {
			if err := workflow.UpsertMemo(ctx, memo); err != nil {
				workflow.GetLogger(ctx).Warn("upsert memo", "error", err)
			}
		}
	}
	if o.step != nil {
		// The step the turn ends in goes in the same upsert as the
		// turn's own memo fields: one event for both.
		var paused *PausedTurn
		if res.Outcome == OutcomePaused {
			paused = &PausedTurn{Owner: in.ClientKeyID, Deadline: workflow.Now(ctx).Add(s.p.TurnTimeout)}
		}
		lres.TurnResult = res
		if o.step.lazy {
			o.step.endTurn(ctx, o.step.ended(ctx, in.TurnID, lres, paused), s.turnMemo(in.TurnID, lres))
		} else {
			o.step.put(ctx, o.step.ended(ctx, in.TurnID, lres, paused), s.turnMemo(in.TurnID, lres))
		}
	}
	switch {
	case res.Outcome == OutcomePaused:
		s.pause(ctx, PausedTurn{Owner: in.ClientKeyID, TurnID: in.TurnID, Deadline: workflow.Now(ctx).Add(s.p.TurnTimeout), Span: in.Span})
	case lres.sessionEnded:
		s.markClosed(ctx, "error")
		s.cleanup(ctx, CleanupInput{SessionID: s.p.SessionID, ClientKeyID: in.ClientKeyID, Reason: "session_error"})
	}
	return res, recorded, nil, nil
}

// turnMemo is the memo fields a turn changes: the profile's name (once
// per run) and the last failed turn, for an operator scanning sessions in
// the Temporal UI.
func (s *session) turnMemo(turnID string, res turnResult) map[string]any {
	memo := map[string]any{}
	if res.profileName != "" && res.profileName != s.memoProfile {
		memo[MemoProfileName] = res.profileName
		s.memoProfile = res.profileName
	}
	if res.Outcome == OutcomeProvidersFailed || res.Outcome == OutcomeFailed {
		msg := string(res.Reason)
		if msg == "" {
			msg = res.Outcome
		}
		switch {
		case res.LastError != "":
			msg += " (" + res.LastError + ")"
		case res.FailedStep != "":
			msg += " (" + res.FailedStep + ")"
		}
		memo[MemoLastError] = msg
		memo[MemoLastErrorTurnID] = turnID
	}
	return memo
}

func (s *session) dequeue(ticket int64) {
	for i, q := range s.queue {
		if q.ticket == ticket {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// pause parks the gate with its owner and arms the abandonment timer.
func (s *session) pause(ctx workflow.Context, p PausedTurn) {
	pt := &p
	s.paused = pt
	remaining := p.Deadline.Sub(workflow.Now(ctx))
	if remaining <= 0 {
		pt.Expired = true
		return
	}
	timerCtx, cancel := workflow.WithCancel(ctx)
	s.cancelTimr = cancel
	workflow.Go(timerCtx, func(ctx workflow.Context) {
		if err := workflow.NewTimer(ctx, remaining).Get(ctx, nil); err != nil {
			return // cancelled: the turn was resumed
		}
		if s.paused == pt {
			pt.Expired = true
		}
	})
}

func (s *session) unpause() {
	if s.cancelTimr != nil {
		s.cancelTimr()
		s.cancelTimr = nil
	}
	s.paused = nil
}

// close is the Close update handler: the API has already moved the session
// out of open in PostgreSQL; this releases waiters and server resources.
func (s *session) close(ctx workflow.Context, in CloseInput) error {
	state := in.State
	if state == "" {
		state = "closed"
	}
	s.markClosed(ctx, state)
	s.unpause()
	s.cleanup(ctx, CleanupInput{SessionID: s.p.SessionID, ClientKeyID: in.ClientKeyID, Reason: in.Reason})
	return nil
}

// launch runs a remote subagent in the background: the turn that launched
// it does not wait, and the session does not end before it does.
func (s *session) launch(ctx workflow.Context, l SubagentLaunch) {
	if _, running := s.subagents[l.SubagentID]; running || s.closed {
		return
	}
	runCtx, cancel := workflow.WithCancel(ctx)
	s.subagents[l.SubagentID] = cancel
	hb := s.turnOptions().heartbeat
	workflow.Go(runCtx, func(gctx workflow.Context) {
		defer delete(s.subagents, l.SubagentID)
		actx := workflow.WithActivityOptions(gctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Duration(l.TimeoutSecs)*time.Second + time.Minute,
			HeartbeatTimeout:    3 * hb,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: SubagentRunAttempts},
		})
		err := runSubagent.run(actx, RunSubagentInput{SessionID: s.p.SessionID, SubagentID: l.SubagentID, Link: l.Link})
		if err != nil && !temporal.IsCanceledError(err) {
			workflow.GetLogger(ctx).Error("remote subagent run failed", "subagent_id", l.SubagentID, "error", err)
		}
	})
}

// cancelSubagent stops a running subagent's activity; the caller already
// recorded the cancellation.
func (s *session) cancelSubagent(ctx workflow.Context, id string) error {
	if cancel, ok := s.subagents[id]; ok {
		cancel()
	}
	return nil
}

// cancelAllSubagents stops every running subagent, in id order so replay
// is deterministic.
func (s *session) cancelAllSubagents() {
	ids := make([]string, 0, len(s.subagents))
	// The ids are sorted below, so the map's order does not matter.
	//workflowcheck:ignore
	for id := range s.subagents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.subagents[id]()
	}
}

func (s *session) markClosed(ctx workflow.Context, state string) {
	if s.closed {
		return
	}
	s.closed = true
	s.endState = state
	s.steps.set(ctx, "", "session "+state)
	if s.p.UseSearchAttributes {
		_ = workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyKeyword(SearchAttrState).ValueSet(state))
	}
}

func (s *session) cleanup(ctx workflow.Context, in CleanupInput) {
	if s.cleaned {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
	})
	if err := cleanupSession.run(actx, in); err != nil {
		workflow.GetLogger(ctx).Error("session cleanup failed", "error", err)
	}
	s.cleaned = true
	s.cancelAllSubagents()
}

// turnOptions are the session's per-turn activity settings, defaults filled.
func (s *session) turnOptions() turnOptions {
	return turnOptions{heartbeat: s.p.HeartbeatTimeout, dbBudget: s.p.DBRetryBudget}.withDefaults()
}
