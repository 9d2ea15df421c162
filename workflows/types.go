// Package workflows holds the Session workflow: one long-running execution per
// agent session that owns the FIFO turn gate and orchestrates each turn's
// activities. It holds control state only; conversation bodies, provider
// payloads and events live in PostgreSQL and are written by activities.
package workflows

import (
	"slices"
	"time"

	"github.com/bae-go/bae-go/events"
)

// Names visible in the Temporal UI and used by clients of the workflow.
const (
	SessionWorkflow   = "Session"
	UpdateSendMessage = "SendMessage"
	// SignalEnqueue puts a stored message's turn in the session's FIFO
	// queue (see enqueue.go); its result is recorded in PostgreSQL.
	SignalEnqueue = "Enqueue"
	UpdateClose   = "Close"
	// UpdateCancelSubagent stops a remote subagent's background run.
	UpdateCancelSubagent = "CancelSubagent"
	QueryControl         = "Control"

	// Memo keys the workflow upserts (besides profile_id and
	// client_version, set at start).
	MemoProfileName     = "profile_name"
	MemoLastError       = "last_error"
	MemoLastErrorTurnID = "last_error_turn_id"
	// MemoCurrentStep is what the session's workflow is doing now: the
	// running turn's step (what it waits on, since when, which attempt),
	// a paused turn's wait, or idle (see step.go).
	MemoCurrentStep = "current_step"

	// Search attributes (Keyword) that make sessions findable in the UI.
	SearchAttrProfileID = "BaeProfileId"
	SearchAttrState     = "BaeSessionState"
)

// MaxIterations caps provider round-trips within one turn.
const MaxIterations = 8

// Turn outcomes.
const (
	OutcomeCompleted       = "completed"
	OutcomePaused          = "paused"
	OutcomeProvidersFailed = "providers_failed"
	OutcomeRejected        = "rejected"
	// OutcomeFailed: a step of the turn failed past its retries. The turn's
	// session.error is logged, its messages are taken out of the
	// conversation, and the session stays open.
	OutcomeFailed = "failed"
	// OutcomeHandedBack: the turn's begin found turns that PostgreSQL says
	// began and have not ended (their workflow task was lost), stored
	// nothing, and handed them back to run first (versionHandBack). The
	// turn waits again, behind them; the outcome is never recorded.
	OutcomeHandedBack = "handed_back"
)

// SessionParams starts (or continues) a Session workflow.
type SessionParams struct {
	SessionID   string
	ProfileID   string
	TurnTimeout time.Duration
	// UseSearchAttributes is false when the cluster lacks the custom
	// attributes (upserting unknown attributes fails the workflow task).
	UseSearchAttributes bool
	// HeartbeatTimeout bounds how long a lost worker holds a provider or
	// tool activity before Temporal retries it elsewhere (0 = 10s).
	HeartbeatTimeout time.Duration
	// DBRetryBudget bounds how long each database step of a turn waits out
	// a database outage (0 = 10 minutes for the workflow's own steps; the
	// worker's setting for activities).
	DBRetryBudget time.Duration
	// TurnsPerRun bounds history growth: the workflow continues as new
	// after this many turns (0 = 200).
	TurnsPerRun int
	// Carry is the control state handed over by continue-as-new.
	Carry *Carry
}

// Carry is the control state that survives continue-as-new.
type Carry struct {
	Paused *PausedTurn
	Turns  int
	// Queue is the signalled turns still waiting, in queue order.
	Queue []SendMessageInput `json:",omitempty"`
	// Ended are the last turns the run ended (at most carriedEnded): a
	// signal stored while one of them ran may reach the next run naming it
	// as ahead (SendMessageInput.Ahead), and must not run it again.
	Ended []string `json:",omitempty"`
}

// PausedTurn is a turn waiting for its owner's client tool results.
type PausedTurn struct {
	Owner    string
	TurnID   string
	Deadline time.Time
	Expired  bool
	// Span is the paused turn's span ref, which its resume links to.
	Span string `json:",omitempty"`
}

// SendMessageInput is the SendMessage update argument. The message body is
// stored in PostgreSQL under TurnID before the update is sent, so it never
// enters workflow history.
type SendMessageInput struct {
	TurnID      string
	ClientKeyID string
	// Span is the bae.turn span's ref (see internal/telemetry), allocated
	// under the sendMessage request's span; "" when the request was not
	// traced. SessionSpan is the bae.session span's, for the turn's link.
	Span        string `json:",omitempty"`
	SessionSpan string `json:",omitempty"`
	// Front puts a signalled turn at the head of the queue (a sendMessage
	// with the interrupt busy policy: it replaces the running turn).
	Front bool `json:",omitempty"`
	// Arrived is when the message was stored, in Unix microseconds (the
	// database's clock, one for every replica): a signal that comes late
	// (its server died before sending it, and a resend or the orphan
	// sweep sent it) still takes its place by arrival. 0 = at the tail.
	Arrived int64 `json:",omitempty"`
	// Ahead are the session's unfinished messages stored before this one
	// (store.PutTurn.Ahead), oldest first. A signalled turn admits first
	// any of them this run has not seen (versionAhead): one whose SendIdle
	// Update or signal is still on its way, or one whose begin committed
	// in a workflow task that was lost (its Update accepted in a
	// speculative task a dead worker never completed). So arrival order is
	// the order turns run, and a turn the store says began is not passed
	// over (and taken out of the conversation) by the next.
	Ahead []AheadTurn `json:",omitempty"`
}

// AheadTurn names an unfinished turn stored before another.
type AheadTurn struct {
	TurnID      string
	ClientKeyID string
	Arrived     int64
}

// Rejection says why a turn was refused without running. Only api/ turns
// it into the client's error code and message.
type Rejection string

// Why a turn is rejected.
const (
	RejectTurnInputMissing   Rejection = "turn_input_missing"
	RejectClientKeyRevoked   Rejection = "client_key_revoked"
	RejectSessionNotOpen     Rejection = "session_not_open" // Detail: the state
	RejectInvalidMessage     Rejection = "invalid_message"
	RejectNoPausedTurn       Rejection = "no_paused_turn"
	RejectMergeInvalid       Rejection = "tool_result_merge_invalid" // Detail: why
	RejectProfileUnavailable Rejection = "profile_unavailable"
)

// TurnResult is the SendMessage update result. The assistant message and the
// events are read from the event log by TurnID.
type TurnResult struct {
	Outcome string
	// Rejection and Detail explain OutcomeRejected.
	Rejection Rejection `json:",omitempty"`
	Detail    string    `json:",omitempty"`
	// ErrorCode and ErrorMessage are how workers before Rejection reported
	// a rejection; still read so their results decode.
	ErrorCode    int    `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
	// FailedStep names the activity that failed, for OutcomeFailed.
	FailedStep string `json:",omitempty"`
	// LastSeq is the sequence of the turn's last event when the workflow
	// knows it (0 otherwise), so the relay knows how far to read.
	LastSeq int64 `json:",omitempty"`
	// Reason is the session.error reason of a turn that failed
	// (all_providers_failed, loop_limit, turn_failed).
	Reason events.Reason `json:",omitempty"`
	// LastError is the last failed provider attempt ("primary: HTTP 503").
	LastError string `json:",omitempty"`
	// Provider is the registry name of the provider that answered last.
	Provider string `json:",omitempty"`
	// Resumed is set when the turn continued its owner's paused turn, whose
	// span ref is ResumedSpan.
	Resumed     bool   `json:",omitempty"`
	ResumedSpan string `json:",omitempty"`
}

// CloseInput is the Close update argument.
type CloseInput struct {
	// State is the state the session was moved to (closed or error).
	State  string
	Reason string
	// ClientKeyID attributes cleanup events.
	ClientKeyID string
}

// ControlView is what the Control query reports, for operators and tests.
type ControlView struct {
	Busy   bool
	Queued int
	Paused *PausedTurn
	Closed bool
	Turns  int
	// Running is the running turn's id ("" when none); QueuedTurns are
	// the waiting turns' ids in queue order; Recording are signalled turns
	// that ended and are recording their result.
	Running     string   `json:",omitempty"`
	QueuedTurns []string `json:",omitempty"`
	Recording   []string `json:",omitempty"`
}

// Holds reports whether the workflow holds the turn: queued, running, or
// recording its result.
func (v ControlView) Holds(turnID string) bool {
	return v.Running == turnID || slices.Contains(v.QueuedTurns, turnID) || slices.Contains(v.Recording, turnID)
}

// SessionRef addresses a session's workflow: enough to start it if it is
// not running.
type SessionRef struct {
	ID            string
	ProfileID     string
	ClientVersion *string
}
