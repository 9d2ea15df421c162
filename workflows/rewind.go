package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
)

// UpdateRewind takes turns out of the conversation the model sees (a
// bae-go extension, see docs/api.md). Histories recorded before it never
// received one, so the handler needs no version gate: it adds commands
// only to runs that are sent a Rewind.
const UpdateRewind = "Rewind"

// RewindInput is the Rewind update argument: rewind to before turn TurnID,
// or else to before the event with seq BeforeSeq.
type RewindInput struct {
	RewindID  string
	TurnID    string `json:",omitempty"`
	BeforeSeq int64  `json:",omitempty"`
	// ClientKeyID is the rewinding driver ("" for an operator); By is it,
	// or events.InterruptedBy.
	ClientKeyID string `json:",omitempty"`
	By          string
}

// RewindRefusal says why a rewind was refused.
type RewindRefusal string

// Rewind refusals.
const (
	RewindSessionNotOpen RewindRefusal = "session_not_open"
	RewindNoSuchPoint    RewindRefusal = "no_such_point"
	RewindBeforeFork     RewindRefusal = "before_fork"
	RewindNothingToDo    RewindRefusal = "nothing_to_rewind"
)

// RewindResult is the Rewind update result and RewindSession's: the
// session.rewind event stored, or why none was.
type RewindResult struct {
	Refusal RewindRefusal `json:",omitempty"`
	Rewind  events.RewindPayload
	// EventID is the session.rewind event's id.
	EventID string `json:",omitempty"`
}

// RewindSessionInput is RewindSession's argument: the request and the turn
// the rewind interrupted first.
type RewindSessionInput struct {
	SessionID   string
	In          RewindInput
	Interrupted string `json:",omitempty"`
}

// rewind is the Rewind update handler. It holds the turn gate ahead of the
// queue: a running or paused turn is interrupted first (as the Interrupt
// update does), no queued turn starts until the rewind is stored, and the
// queued turns then run on the rewound conversation. Turns end before the
// rewind reads the log, so a rewind racing a turn's end sees the turn
// either running (interrupted, then rewound) or ended.
func (s *session) rewind(ctx workflow.Context, in RewindInput) (RewindResult, error) {
	if s.closed {
		return RewindResult{Refusal: RewindSessionNotOpen}, nil
	}
	s.rewinding++
	defer func() { s.rewinding-- }()
	var interrupted string
	if s.live != nil || s.paused != nil {
		r, err := s.interrupt(ctx, InterruptInput{By: in.By})
		if err != nil {
			return RewindResult{}, err
		}
		if r.Interrupted {
			interrupted = r.TurnID
		}
	}
	if err := workflow.Await(ctx, func() bool { return !s.busy || s.closed }); err != nil {
		return RewindResult{}, err
	}
	if s.closed {
		return RewindResult{Refusal: RewindSessionNotOpen}, nil
	}
	s.busy = true
	defer func() { s.busy = false }()
	return rewindSession.runLocal(dbCtx(ctx, s.turnOptions()), RewindSessionInput{SessionID: s.p.SessionID, In: in, Interrupted: interrupted})
}
