package workflows

import (
	"time"

	"github.com/bae-go/bae-go/events"
)

// Activity names and their argument/result types. The implementations live
// in package activities; the workflow refers to them by name so it does not
// depend on I/O code.
const (
	ActBeginTurn        = "BeginTurn"
	ActCallProvider     = "CallProvider"
	ActCallMCPTool      = "CallMCPTool"
	ActExecSandbox      = "ExecSandbox"
	ActRunSubagentTool  = "RunSubagentTool"
	ActRunSubagent      = "RunSubagent"
	ActFinishIteration  = "FinishIteration"
	ActFailTurn         = "FailTurn"
	ActCleanupSession   = "CleanupSession"
	ActCompactContext   = "CompactContext"
	ActInterruptTurn    = "InterruptTurn"
	ActRecordTurnResult = "RecordTurnResult"
	ActRewindSession    = "RewindSession"
	ActRequestApproval  = "RequestApproval"
	ActSettleApproval   = "SettleApproval"
)

// RecordTurnResultInput stores a signalled turn's result for the server
// relaying it (see store.RecordTurnResult).
type RecordTurnResultInput struct {
	SessionID string
	TurnID    string
	Result    TurnResult
	// In and Started are the turn as it was signalled and when the
	// workflow took it, for the turn's log line and bae.turn span.
	In      SendMessageInput `json:",omitempty"`
	Started time.Time        `json:",omitempty"`
}

// TurnRef identifies a turn and its acting client.
type TurnRef struct {
	SessionID   string
	TurnID      string
	ClientKeyID string
	// Span is the turn's span ref: activities start their spans under it.
	Span string `json:",omitempty"`
}

// BeginTurnInput records the client's message and opens the turn.
type BeginTurnInput struct {
	TurnRef
	// Resume is true when a paused turn exists; Abandon when it belongs to
	// another driver whose time ran out.
	Resume  bool
	Abandon bool
	// AbandonedOwner is the paused turn's owner when Abandon is set.
	AbandonedOwner string
	// HandBack (versionHandBack): a turn that PostgreSQL says began and
	// has not ended, its messages still in the conversation, is not taken
	// out of it: the begin stores nothing and answers OutcomeHandedBack
	// with those turns (BeginTurnResult.Ahead), for the workflow to run
	// first when it has not run them.
	HandBack bool `json:",omitempty"`
}

// BeginTurnResult tells the workflow how to proceed.
type BeginTurnResult struct {
	// Outcome is empty to continue with the provider walk, or a terminal
	// outcome (rejected or providers_failed).
	Outcome   string
	Rejection Rejection `json:",omitempty"`
	Detail    string    `json:",omitempty"`
	// ErrorCode and ErrorMessage: begin results stored by older workers.
	ErrorCode    int    `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
	// SessionEnded is set when the activity moved the session to error, or
	// found it already ended (a workflow restarted for a closed session).
	SessionEnded bool
	// Providers are the registry names to try in order (primary first).
	Providers []string
	// Models are the providers' models, in the same order, for the turn's
	// current step in the Temporal UI (see step.go); absent from results
	// stored before it.
	Models []string `json:",omitempty"`
	// ProfileName is the session's profile's name, for the memo.
	ProfileName string `json:",omitempty"`
	// Approvals: the profile has an approval policy, so the turn asks
	// RequestApproval before each server-side call (versionApprovals).
	Approvals bool `json:",omitempty"`
	// Ahead are the turns an OutcomeHandedBack begin found begun and not
	// ended, oldest first.
	Ahead []AheadTurn `json:",omitempty"`
}

// CallProviderInput is one attempt of the fallback walk.
type CallProviderInput struct {
	TurnRef
	Iteration int
	Attempt   int
	Provider  string
	// FailAsError asks for a failed attempt as an ErrProviderAttemptFailed
	// activity failure (shown failed in the Temporal UI) instead of a
	// completed OK=false result; workflow code that predates it leaves it
	// unset.
	FailAsError bool `json:",omitempty"`
	// Begin, on a turn's first attempt (versionBeginInAttempt), begins the
	// turn in the same local activity: BeginTurn runs first, and the attempt
	// goes to the primary provider it names (Provider is then empty); the
	// result carries BeginTurn's in Begin. A turn that does not begin
	// (rejected, or its session ended) makes no attempt and answers with
	// Begin alone. A retry finds both the begin and the response already
	// stored.
	Begin *BeginTurnInput `json:",omitempty"`
	// Compact (versionCompaction): the attempt sends a view of the
	// conversation bounded by the provider's budget, and answers
	// NeedsCompaction instead of calling when only a summary would make it
	// fit, or when the provider refused it as too long.
	Compact bool `json:",omitempty"`
	// Retry counts the attempt's retries after a compaction; it names the
	// retry's events apart from the first try's.
	Retry int `json:",omitempty"`
	// Stoppable (versionStopCall): an interrupt's stop message may end the
	// provider call at once; the attempt then fails with ErrAttemptStopped
	// and the workflow waits for the Interrupt update (see runAttempt).
	Stoppable bool `json:",omitempty"`
	// Budgets (versionBudgets): the attempt reads the budgets its call is
	// under first and, when one is spent, answers BudgetSpent instead of
	// calling.
	Budgets bool `json:",omitempty"`
	// Record (versionResultWithAppend) asks the attempt, when it stores a
	// final answer, to store the turn's result in the same transaction
	// and report the turn, as RecordTurnResult would (its Result holds
	// what the workflow adds: Resumed, ResumedSpan); the result then says
	// Recorded.
	Record *RecordTurnResultInput `json:",omitempty"`
}

// BudgetSpent names the budget that stopped an attempt before its call.
type BudgetSpent struct {
	Scope   string
	Subject string
	// Detail names the budget and when it resets (store.BudgetState.Describe).
	Detail string
}

// CompactionNeed says why an attempt needs compacting before it can go on.
type CompactionNeed struct {
	// TooLong: the provider refused the request as longer than its window
	// (compact harder); else the estimate passed the policy's trigger.
	TooLong bool `json:",omitempty"`
	// NoFit: even the hardest compaction leaves the view over the budget.
	NoFit bool `json:",omitempty"`
}

// CompactContextInput summarizes the oldest turns of a session's
// conversation for an attempt (CompactContext, a regular activity: it
// calls a provider, so it retries and shows in the Temporal UI).
type CompactContextInput struct {
	TurnRef
	Iteration int
	Attempt   int
	Retry     int
	// Provider is the attempt's provider, whose budget the view must fit;
	// Providers is the session's chain, the default summarizers.
	Provider  string
	Providers []string
	// Harder keeps only the current turn verbatim (a too-long refusal).
	Harder bool `json:",omitempty"`
}

// ErrProviderAttemptFailed is the non-retryable application error type of
// a provider attempt that failed after its events were stored.
const ErrProviderAttemptFailed = "ProviderAttemptFailed"

// ErrAttemptStopped is the non-retryable application error type of a
// Stoppable attempt whose provider call an interrupt's stop message ended:
// no retry and no fallback follow it; the Interrupt update decides.
const ErrAttemptStopped = "AttemptStopped"

// ErrTurnSuperseded is the non-retryable application error type of a
// provider attempt whose turn PostgreSQL no longer holds as the live end of
// the session's conversation (interrupted, taken out of the conversation,
// or a later turn began while the attempt still ran on a worker Temporal
// had given up on): it stored nothing, and no retry could.
const ErrTurnSuperseded = "TurnSuperseded"

// ErrSessionNotOpen is the non-retryable application error type of an
// activity whose events the store refused because the session left the
// open state (closed meanwhile); its detail is the session's state. The
// turn ends refused, with nothing more stored.
const ErrSessionNotOpen = "SessionNotOpen"

// ToolCall is a tool_use block classified for dispatch.
type ToolCall struct {
	ID       string
	Name     string
	Dispatch events.Dispatch
	Server   string `json:",omitempty"`
}

// CallProviderResult is the attempt's outcome.
type CallProviderResult struct {
	OK bool
	// Final: a tool-free answer was recorded (server.message.send).
	Final bool
	// ToolCalls lists the assistant's tool_use blocks in order.
	ToolCalls []ToolCall
	// LastSeq is the sequence of the last event the attempt appended, when
	// known (0 otherwise): the relay of the turn reads up to it.
	LastSeq int64 `json:",omitempty"`
	// Recorded: the turn's result was stored with the final answer
	// (CallProviderInput.Record).
	Recorded bool `json:",omitempty"`
	// Begin is BeginTurn's result when the input carried Begin.
	Begin *BeginTurnResult `json:",omitempty"`
	// NeedsCompaction (Compact inputs only): the attempt stopped before
	// calling, or after a too-long refusal, for the workflow to compact
	// and retry it.
	NeedsCompaction *CompactionNeed `json:",omitempty"`
	// BudgetSpent (Budgets inputs only): a budget was spent, the attempt
	// made no call and logged nothing.
	BudgetSpent *BudgetSpent `json:",omitempty"`
}

// ToolCallInput dispatches one server-side tool call.
type ToolCallInput struct {
	TurnRef
	Iteration int
	Call      ToolCall
	// ApprovalID names the call's approval when it was held: the tool runs
	// with the arguments approved there (the model's, or a decider's
	// edit).
	ApprovalID string `json:",omitempty"`
}

// FinishIterationInput closes an iteration that had tool calls.
type FinishIterationInput struct {
	TurnRef
	Iteration int
	Calls     []ToolCall
}

// FinishIterationResult reports whether the turn paused for client tools.
type FinishIterationResult struct {
	Paused bool
	// LastSeq is the sequence of the last event appended, when known.
	LastSeq int64 `json:",omitempty"`
}

// FailTurnInput ends a turn in failure. For ReasonTurnFailed the session
// stays open and the turn's messages leave the conversation; for the other
// reasons the session moves to error.
type FailTurnInput struct {
	TurnRef
	Reason   events.Reason
	Attempts int
	// Step is the activity that failed (ReasonTurnFailed).
	Step string `json:",omitempty"`
	// Detail explains the failure (StepBudget: which budget, and when it
	// resets).
	Detail string `json:",omitempty"`
}

// CleanupInput releases a session's server-side resources at its end.
type CleanupInput struct {
	SessionID   string
	ClientKeyID string
	Reason      string
}

// ToolCallResult is what a tool dispatch tells the workflow beyond the
// events it logged: a remote subagent to run in the background.
type ToolCallResult struct {
	Launch *SubagentLaunch `json:",omitempty"`
}

// SubagentLaunch starts a remote subagent run that outlives the turn.
type SubagentLaunch struct {
	SubagentID  string
	TimeoutSecs int
	// Link is the launching bae.tool.dispatch span's ref.
	Link string `json:",omitempty"`
}

// SubagentRunAttempts is how many attempts RunSubagent gets. An attempt
// after a lost worker collects the run the first one started; several are
// allowed because a stopping worker can take a retry it never runs (it then
// only times out).
const SubagentRunAttempts = 5

// RunSubagentInput runs one launched subagent to completion.
type RunSubagentInput struct {
	SessionID  string
	SubagentID string
	// Link is the launching bae.tool.dispatch span's ref: the subagent's
	// own trace links back to it.
	Link string `json:",omitempty"`
}

// InterruptTurnInput closes an interrupted turn (InterruptTurn).
type InterruptTurnInput struct {
	TurnRef
	// By is who interrupted (InterruptInput.By).
	By string
	// Paused: the turn is the session's paused turn.
	Paused bool `json:",omitempty"`
	// Begin is the turn's begin, made here when the interrupt came before
	// the turn began (its message then still enters the conversation).
	Begin *BeginTurnInput `json:",omitempty"`
}

// InterruptTurnResult says how the interrupted turn ended.
type InterruptTurnResult struct {
	// LastSeq is the sequence of the turn's last event.
	LastSeq int64 `json:",omitempty"`
	// Outcome is set when the turn had already ended on its own
	// (completed, or paused and then resumed or abandoned by a later
	// turn); "" when it ended interrupted.
	Outcome string `json:",omitempty"`
	// Begin is the begin's result when InterruptTurn began the turn and
	// the begin refused it.
	Begin *BeginTurnResult `json:",omitempty"`
	// NotPaused: the input said Paused, but the session's paused turn is
	// no longer that turn (it was resumed or abandoned first); nothing
	// was stored.
	NotPaused bool `json:",omitempty"`
}
