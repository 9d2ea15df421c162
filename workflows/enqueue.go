package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"
)

// versionSignalQueue: turns arrive as Enqueue signals and each records its
// result with RecordTurnResult. A signal has no in-flight limit, where a
// waiting SendMessage Update counts against the cluster's per-execution
// cap (10 on a stock server and on Temporal Cloud), so any number of
// drivers can wait in the FIFO queue. Histories from workers before it
// never took a signal from the channel: replaying one, the signal is
// dropped again, and the orphan sweep sends its turn once more.
const (
	changeSignalQueue  = "turn-signals"
	versionSignalQueue = 1
)

// versionAhead: a signalled turn first admits the unfinished turns the
// store saw ahead of it that this run has not seen (SendMessageInput.Ahead).
// Histories recorded before it carry no Ahead.
const (
	changeAhead  = "turns-ahead"
	versionAhead = 1
)

// versionHandBack: a turn's begin that finds turns PostgreSQL says began
// and have not ended, their messages still in the conversation (their
// workflow task was lost, and no submission naming them as ahead came
// first), hands them back instead of taking them out of the conversation
// (BeginTurnInput.HandBack): the workflow runs those it has not seen
// first, then the turn. Histories recorded before it take them out.
const (
	changeHandBack  = "turns-handed-back"
	versionHandBack = 1
)

// versionHandBackQueued: a handed-back turn this run has queued but not
// run (its signal redelivered after the task that began it was lost, and a
// busy-interrupt turn put ahead of it at the head of the queue) moves in
// front of the turn whose begin handed it back, as an unseen one is
// admitted there: PostgreSQL stored and began it first. Histories recorded
// before it drop such a turn, and the begin, run again, takes it out of
// the conversation (it later ends superseded). Asked only when a begin
// hands back a queued turn, so other histories hold no marker for it.
const (
	changeHandBackQueued  = "turns-handed-back-queued"
	versionHandBackQueued = 1
)

// receiveTurns admits every Enqueue signal, in the order the history
// holds them, which is the order the API stored and sent them.
func (s *session) receiveTurns(ctx workflow.Context) {
	for {
		var in SendMessageInput
		s.signals.Receive(ctx, &in)
		if workflow.GetVersion(ctx, changeSignalQueue, workflow.DefaultVersion, versionSignalQueue) == workflow.DefaultVersion {
			continue
		}
		s.admit(ctx, in)
	}
}

// admit queues a signalled turn and runs it when its turn comes. A turn id
// seen before in this run is a resubmission (the orphan sweep, a resend)
// and is dropped: it is queued, running or done. One that ended in an
// earlier run is refused by its begin, without replacing the result
// recorded then.
func (s *session) admit(ctx workflow.Context, in SendMessageInput) {
	s.admitAt(ctx, in, false)
}

// admitAt is admit, at the head of the queue when front (a turn handed
// back: see handBack).
func (s *session) admitAt(ctx workflow.Context, in SendMessageInput, front bool) {
	if in.TurnID == "" || in.ClientKeyID == "" || s.seen[in.TurnID] {
		return
	}
	s.admitAhead(ctx, in.Ahead)
	s.seen[in.TurnID] = true
	started := workflow.Now(ctx)
	var ticket int64
	if front {
		ticket = s.enqueueFront(in, true)
	} else {
		ticket = s.enqueue(in, true)
	}
	s.pending++
	s.steps.describe(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { s.pending-- }()
		defer func() { s.dequeue(ticket) }()
		for {
			if err := s.awaitGate(ctx, in, ticket, true); err != nil {
				return // the run ended (continue-as-new carries the turn)
			}
			s.dequeue(ticket)
			_, ahead := s.runAndRecord(ctx, in, started)
			if len(ahead) == 0 {
				return
			}
			ticket = s.handBack(ctx, in, true, ahead)
		}
	})
}

// enqueueFront gives a turn the next ticket at the head of the queue.
func (s *session) enqueueFront(in SendMessageInput, signalled bool) int64 {
	ticket := s.nextTicket
	s.nextTicket++
	s.queue = append([]queuedTurn{{ticket: ticket, in: in, signalled: signalled}}, s.queue...)
	return ticket
}

// handBack puts a turn whose begin handed turns back at the head of the
// queue, behind those turns, oldest first: they were stored (and began)
// before it. One already queued moves there (versionHandBackQueued); the
// others are admitted there. It returns the turn's new ticket.
func (s *session) handBack(ctx workflow.Context, in SendMessageInput, signalled bool, ahead []AheadTurn) int64 {
	ticket := s.enqueueFront(in, signalled)
	for i := len(ahead) - 1; i >= 0; i-- {
		a := ahead[i]
		// Gated here too: a SendMessage Update's queued turn is not in
		// seen, and histories recorded before it admitted it again.
		if s.queuedAt(a.TurnID) >= 0 && workflow.GetVersion(ctx, changeHandBackQueued, workflow.DefaultVersion, versionHandBackQueued) >= versionHandBackQueued {
			s.toFront(a.TurnID)
			continue
		}
		s.admitAt(ctx, SendMessageInput{TurnID: a.TurnID, ClientKeyID: a.ClientKeyID, Arrived: a.Arrived}, true)
	}
	workflow.GetLogger(ctx).Warn("turns begun and not ended run first", "turn_id", in.TurnID, "ahead", ahead)
	return ticket
}

// toFront moves a queued turn to the head of the queue, keeping its
// ticket (its waiter takes the gate at the head), and reports whether it
// was queued.
func (s *session) toFront(turnID string) bool {
	i := s.queuedAt(turnID)
	if i < 0 {
		return false
	}
	q := s.queue[i]
	s.queue = slices.Insert(slices.Delete(s.queue, i, i+1), 0, q)
	return true
}

// queuedAt is the queue position of a turn waiting for the gate, or -1.
func (s *session) queuedAt(turnID string) int {
	return slices.IndexFunc(s.queue, func(q queuedTurn) bool { return q.in.TurnID == turnID })
}

// unseen are the turns of ahead this run is to run before the one whose
// begin handed them back, in their order: those it has not seen
// (admitted, run or ended), and (versionHandBackQueued) those it has
// queued and not yet run. A turn it ran (its result failed to record) is
// left out: the begin, run again, takes its messages out.
func (s *session) unseen(ctx workflow.Context, ahead []AheadTurn) []AheadTurn {
	var out []AheadTurn
	requeue := 0 // 0: not asked yet; 1: yes; -1: no
	for _, a := range ahead {
		if s.seen[a.TurnID] {
			if s.queuedAt(a.TurnID) < 0 {
				continue
			}
			if requeue == 0 {
				requeue = -1
				if workflow.GetVersion(ctx, changeHandBackQueued, workflow.DefaultVersion, versionHandBackQueued) >= versionHandBackQueued {
					requeue = 1
				}
			}
			if requeue < 0 {
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// admitAhead admits, oldest first, the turns stored before a signalled
// one that this run has not seen, as if their own signals had come first:
// their place is by arrival (the late-signal rule), so they run before it.
// Their own submission, when it comes, is dropped (a signal) or refused (a
// SendIdle Update: its server then waits for the recorded result). A turn
// whose begin already committed (its SendIdle task lost with a worker)
// runs again from what the store holds: the begin and a stored provider
// answer are read back, not made twice.
func (s *session) admitAhead(ctx workflow.Context, ahead []AheadTurn) {
	unseen := false
	for _, a := range ahead {
		unseen = unseen || !s.seen[a.TurnID]
	}
	if !unseen || workflow.GetVersion(ctx, changeAhead, workflow.DefaultVersion, versionAhead) < versionAhead {
		return
	}
	for _, a := range ahead {
		s.admit(ctx, SendMessageInput{TurnID: a.TurnID, ClientKeyID: a.ClientKeyID, Arrived: a.Arrived})
	}
}

// runAndRecord runs a turn that holds the gate (taken by the caller in the
// same workflow step: the session is marked busy before anything yields)
// and records its result in PostgreSQL, where the server relaying the turn
// waits for it. A turn the session's close reached first is refused. One
// whose begin handed turns back records nothing and returns them as ahead.
func (s *session) runAndRecord(ctx workflow.Context, in SendMessageInput, started time.Time) (TurnResult, []AheadTurn) {
	s.recording++
	var ahead []AheadTurn
	defer func() {
		s.recording--
		if len(ahead) > 0 {
			return // it has not ended
		}
		s.ended = append(s.ended, in.TurnID)
		if len(s.ended) > carriedEnded {
			s.ended = s.ended[len(s.ended)-carriedEnded:]
		}
	}()
	res := TurnResult{Outcome: OutcomeRejected, Rejection: RejectSessionNotOpen, Detail: s.endState}
	if !s.closed {
		var (
			recorded bool
			err      error
		)
		if res, recorded, ahead, err = s.runGated(ctx, in, true, started); err != nil {
			workflow.GetLogger(ctx).Error("turn failed in the workflow", "turn_id", in.TurnID, "error", err)
			res = TurnResult{Outcome: OutcomeFailed, FailedStep: "workflow"}
		} else if len(ahead) > 0 {
			return res, ahead
		} else if recorded {
			return res, nil // stored with the turn's final answer
		}
	}
	s.recordingIDs = append(s.recordingIDs, in.TurnID)
	defer func() {
		s.recordingIDs = slices.DeleteFunc(s.recordingIDs, func(id string) bool { return id == in.TurnID })
	}()
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	rec := RecordTurnResultInput{SessionID: s.p.SessionID, TurnID: in.TurnID, Result: res, In: in, Started: started}
	if _, err := recordResult.runLocal(dbCtx(dctx, s.turnOptions()), rec); err != nil {
		workflow.GetLogger(ctx).Error("record turn result", "turn_id", in.TurnID, "error", err)
	}
	return res, nil
}

// carriedQueue is the signalled turns still waiting, in queue order, for
// the next run.
func (s *session) carriedQueue() []SendMessageInput {
	var q []SendMessageInput
	for _, t := range s.queue {
		if t.signalled {
			// What was ahead of it was admitted in this run.
			in := t.in
			in.Ahead = nil
			q = append(q, in)
		}
	}
	return q
}
