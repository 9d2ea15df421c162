package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
)

type turnResult struct {
	TurnResult
	sessionEnded bool
	profileName  string
	// recorded: the final attempt stored the result (turnOptions.record).
	recorded bool
	// ahead are the turns an OutcomeHandedBack turn handed back to run
	// first, oldest first.
	ahead []AheadTurn
}

// turnNotes is what a turn learns on the way, for its result and the memo.
type turnNotes struct {
	profileName string
	provider    string
	lastError   string
}

// turnOptions are the session-wide settings every turn's steps use.
type turnOptions struct {
	// heartbeat bounds how long a lost worker holds a provider or tool call.
	heartbeat time.Duration
	// dbBudget is how long a database step waits out an outage.
	dbBudget time.Duration
	// observable (versionObservability): a failed provider attempt is a
	// failed activity, and the memo names the profile and the last error.
	observable bool
	// localProvider (versionLocalProvider): provider attempts run as local
	// activities.
	localProvider bool
	// beginInAttempt (versionBeginInAttempt): BeginTurn runs inside the
	// turn's first provider attempt (needs localProvider).
	beginInAttempt bool
	// compaction (versionCompaction): attempts send a bounded view and the
	// turn compacts and retries when it does not fit.
	compaction bool
	// interruptible (versionInterrupt): the turn runs under a context the
	// Interrupt update cancels (see interrupt.go).
	interruptible bool
	// stoppable (versionStopCall, needs interruptible and localProvider):
	// an interrupt may stop the running provider call from outside the
	// workflow (see runAttempt).
	stoppable bool
	// budgets (versionBudgets): attempts check the budgets before calling.
	budgets bool
	// record (versionResultWithAppend): the turn's result is stored with
	// its final answer; nil when the caller records it (or never does).
	record *RecordTurnResultInput
	// gate (versionApprovals) holds server-side calls the profile's
	// approval policy names until someone decides; nil runs them at once.
	gate *approvalGate
	// step (versionTurnStep) reports each step in the memo; nil reports
	// nothing.
	step *stepper
	// unseen (versionHandBack) keeps the turns a begin handed back that
	// this run is to run first (session.unseen); nil when the begin may
	// not hand any back.
	unseen func(workflow.Context, []AheadTurn) []AheadTurn
}

func (o turnOptions) withDefaults() turnOptions {
	if o.heartbeat <= 0 {
		o.heartbeat = 10 * time.Second
	}
	if o.dbBudget <= 0 {
		o.dbBudget = 10 * time.Minute
	}
	return o
}

// dbActivity options: short PostgreSQL transactions, run as local activities
// (no extra task round-trip) and retried until the database answers, for up
// to the database budget.
func dbCtx(ctx workflow.Context, o turnOptions) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// Schedule-to-close bounds the retries too; without it one slow
		// attempt would use up the whole budget.
		ScheduleToCloseTimeout: o.dbBudget,
		StartToCloseTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
		},
	})
}

// ProviderAttempts is how many times one provider attempt is tried on
// transport failures before it counts as failed.
const ProviderAttempts = 3

// providerCtx: an activity that calls a provider, tried attempts times: one
// attempt of the fallback walk (ProviderAttempts), or CompactContext
// (CompactAttempts). Its database steps wait out an outage inside the
// attempt (the activity heartbeats meanwhile), so the attempt's time bound
// includes the database budget before and after the call; the retry policy
// covers only provider transport errors.
func providerCtx(ctx workflow.Context, o turnOptions, attempts int32) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: providerCallBound(o),
		HeartbeatTimeout:    o.heartbeat,
		RetryPolicy:         providerRetry(attempts),
	})
}

// providerCallBound bounds one try of a provider call, with the database
// budget before and after it.
func providerCallBound(o turnOptions) time.Duration { return 10*time.Minute + 2*o.dbBudget }

// providerRetry retries a provider call's transport failures, local or not.
func providerRetry(attempts int32) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:    250 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Second,
		MaximumAttempts:    attempts,
	}
}

func toolCtx(ctx workflow.Context, timeout time.Duration, o turnOptions) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout + 2*o.dbBudget,
		HeartbeatTimeout:    3 * o.heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    ToolAttempts,
		},
	})
}

// providerLocalCtx runs an attempt as a local activity: the turn's provider
// call happens inside the workflow task that began the turn, so a text turn
// takes one workflow task instead of two plus an activity task. A worker
// lost mid-call shows as the workflow task timing out; the next worker
// replays and runs the attempt again, which returns a response already
// stored instead of calling again, as a retried activity does.
func providerLocalCtx(ctx workflow.Context, o turnOptions) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: providerCallBound(o),
		RetryPolicy:         providerRetry(ProviderAttempts),
	})
}

// runAttempt runs one attempt of the fallback walk, as a local activity
// when the run records versionLocalProvider.
//
// A local attempt runs inside a workflow task, and an Interrupt update is
// delivered only when that task ends, which a long provider call delays
// until the task's heartbeat (seconds). So an interrupt also asks the
// worker running the call to stop it (versionStopCall): the attempt then
// fails with ErrAttemptStopped, the task ends, and the update arrives. The
// update stays the authority: the turn waits for it (it cancels ctx), and
// a stop that no update follows within stopConfirmWait (its sender died
// between the two) is void: the attempt runs again.
func runAttempt(ctx workflow.Context, o turnOptions, in CallProviderInput) (CallProviderResult, error) {
	if !o.localProvider {
		return callProvider.run(providerCtx(ctx, o, ProviderAttempts), in)
	}
	in.Stoppable = o.stoppable
	for {
		res, err := callProvider.runLocal(providerLocalCtx(ctx, o), in)
		if !in.Stoppable || !attemptStopped(err) {
			return res, err
		}
		if _, err := workflow.AwaitWithTimeout(ctx, stopConfirmWait, func() bool { return false }); err != nil {
			return CallProviderResult{}, err // interrupted: ctx is cancelled
		}
		workflow.GetLogger(ctx).Warn("provider call stopped but no interrupt followed; calling again", "turn_id", in.TurnID)
	}
}

// stopConfirmWait bounds how long a stopped attempt waits for the
// Interrupt update that follows its stop message (sent right after it).
const stopConfirmWait = 10 * time.Second

// attemptStopped reports an attempt that an interrupt's stop message ended.
func attemptStopped(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrAttemptStopped
}

// CompactAttempts is how many times CompactContext is tried; its last
// try clears instead of summarizing when the summarizer keeps failing.
const CompactAttempts = 3

// MaxCompactRetries bounds how often one attempt is compacted and retried:
// once for the budget, once more (harder) after a too-long refusal.
const MaxCompactRetries = 2

// ToolAttempts bounds a server tool activity's attempts. A tool's own
// failure is a result, not an attempt: attempts are spent only by lost
// workers and outages past the database budget, so a turn rides out
// several crashes in a row (sandbox execs and subagents collect their
// first run; an MCP call may run again, see docs/design.md).
const ToolAttempts = 10

// launchFn starts a remote subagent's background run.
type launchFn func(SubagentLaunch)

// runTurn orchestrates one turn: record the client's message, walk the
// providers, dispatch server-side tools, and loop until a final answer, a
// pause for client tools, a provider failure, or the iteration cap. A step
// that fails past its retries ends the turn as OutcomeFailed, logged and
// taken out of the conversation, so the session can go on.
func runTurn(ctx workflow.Context, in BeginTurnInput, o turnOptions, launch launchFn) (turnResult, error) {
	o = o.withDefaults()
	var notes turnNotes
	res, err := turnSteps(ctx, in, o, launch, &notes)
	if err == nil {
		res.profileName, res.Provider = notes.profileName, notes.provider
		if res.Outcome == OutcomeProvidersFailed {
			res.LastError = notes.lastError
		}
	}
	if err == nil || temporal.IsCanceledError(err) {
		return res, err
	}
	if superseded(err) && workflow.GetVersion(ctx, changeSuperseded, workflow.DefaultVersion, versionSuperseded) >= versionSuperseded {
		return supersededTurn(ctx, in, notes), nil
	}
	if state, closed := sessionNotOpen(err); closed {
		// The session was closed under the turn: the store refused its
		// next event, and a failure could not be stored either.
		workflow.GetLogger(ctx).Info("turn ended: the session was closed", "turn_id", in.TurnID, "state", state)
		return turnResult{TurnResult: TurnResult{Outcome: OutcomeRejected, Rejection: RejectSessionNotOpen, Detail: state}, profileName: notes.profileName}, nil
	}
	step := "unknown"
	var ae *temporal.ActivityError
	if errors.As(err, &ae) {
		step = ae.ActivityType().GetName()
	}
	workflow.GetLogger(ctx).Error("turn step failed past its retries", "turn_id", in.TurnID, "step", step, "error", err)
	if ferr := failTurnAct.runLocal(dbCtx(ctx, o), FailTurnInput{TurnRef: in.TurnRef, Reason: events.ReasonTurnFailed, Step: step}); ferr != nil {
		if superseded(ferr) && workflow.GetVersion(ctx, changeSuperseded, workflow.DefaultVersion, versionSuperseded) >= versionSuperseded {
			// The step failed because the conversation had moved on (its
			// tool_use taken out with the turn, say), and the failure
			// found that too: it stores nothing. (No history recorded
			// before FailTurn was fenced holds such an answer.)
			return supersededTurn(ctx, in, notes), nil
		}
		return turnResult{}, err
	}
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeFailed, FailedStep: step, Reason: events.ReasonTurnFailed}, profileName: notes.profileName}, nil
}

// supersededTurn ends a turn that PostgreSQL moved on from (a run of it
// that this history does not hold ended it, an interrupt, or a later
// turn): it stored nothing, and neither does its end here, which a
// failure's repair would (taking out what a later turn or an interrupt
// stored).
func supersededTurn(ctx workflow.Context, in BeginTurnInput, notes turnNotes) turnResult {
	workflow.GetLogger(ctx).Warn("turn ended: superseded in PostgreSQL", "turn_id", in.TurnID)
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeFailed, FailedStep: StepSuperseded, Reason: events.ReasonTurnFailed}, profileName: notes.profileName}
}

func turnSteps(ctx workflow.Context, in BeginTurnInput, o turnOptions, launch launchFn, notes *turnNotes) (turnResult, error) {
	ref := in.TurnRef
	o.step.providerCall(ctx, ref.TurnID, nil, nil, 0, 0, 0)
	in.HandBack = o.unseen != nil
	begin, first, err := startTurn(ctx, in, o)
	if err == nil && begin.Outcome == OutcomeHandedBack {
		if ahead := o.unseen(ctx, begin.Ahead); len(ahead) > 0 {
			return turnResult{TurnResult: TurnResult{Outcome: OutcomeHandedBack}, ahead: ahead}, nil
		}
		// This run ran them (their results failed to record): their
		// messages go, as before.
		in.HandBack = false
		begin, first, err = startTurn(ctx, in, o)
	}
	if err != nil {
		return turnResult{}, err
	}
	o.step.learnWalk(begin)
	notes.profileName = begin.ProfileName
	if begin.Outcome != "" {
		return turnResult{TurnResult: TurnResult{Outcome: begin.Outcome, Rejection: begin.Rejection, Detail: begin.Detail, ErrorCode: begin.ErrorCode, ErrorMessage: begin.ErrorMessage}, sessionEnded: begin.SessionEnded}, nil
	}
	for it := 0; it < MaxIterations; it++ {
		var res CallProviderResult
		noFit := false // the last attempt could not be made to fit
		for attempt, name := range begin.Providers {
			for retry := 0; ; retry++ {
				if it == 0 && attempt == 0 && retry == 0 && first != nil {
					res, err = first.res, first.err // made with the begin
				} else {
					o.step.providerCall(ctx, ref.TurnID, begin.Providers, begin.Models, it, attempt, retry)
					res, err = runAttempt(ctx, o, CallProviderInput{TurnRef: ref, Iteration: it, Attempt: attempt, Provider: name, FailAsError: o.observable, Compact: o.compaction, Retry: retry, Budgets: o.budgets, Record: o.record})
				}
				if err == nil && res.BudgetSpent != nil {
					// No fallback spends another budget: the turn ends here.
					return budgetFailure(ctx, o, ref, *res.BudgetSpent)
				}
				need := res.NeedsCompaction
				if err != nil || need == nil || need.NoFit || retry >= MaxCompactRetries {
					break
				}
				o.step.set(ctx, ref.TurnID, fmt.Sprintf("compacting the context for %s: iteration %d, attempt %d", name, it+1, attempt+1))
				// CompactContext is a regular activity (it calls a provider:
				// retried, heartbeating, visible in the Temporal UI). Its last
				// attempt falls back to clearing instead of failing.
				if err := compactContext.run(providerCtx(ctx, o, CompactAttempts), CompactContextInput{
					TurnRef: ref, Iteration: it, Attempt: attempt, Retry: retry, Provider: name, Providers: begin.Providers,
					Harder: need.TooLong || retry > 0,
				}); err != nil {
					return turnResult{}, err
				}
			}
			noFit = err == nil && res.NeedsCompaction != nil
			if noFit {
				res = CallProviderResult{}
				notes.lastError = name + ": the conversation does not fit its context window"
				continue
			}
			if detail, failed := attemptFailure(err); failed {
				res = CallProviderResult{}
				notes.lastError = name + ": " + detail
				continue
			}
			if err != nil {
				return turnResult{}, err
			}
			if res.OK {
				notes.provider = name
				break
			}
			notes.lastError = name + ": failed"
		}
		if !res.OK && noFit {
			// Too long for every way of compacting it: the turn fails, the
			// session goes on.
			in := FailTurnInput{TurnRef: ref, Reason: events.ReasonTurnFailed, Step: StepContextWindow}
			if err := failTurnAct.runLocal(dbCtx(ctx, o), in); err != nil {
				return turnResult{}, err
			}
			return turnResult{TurnResult: TurnResult{Outcome: OutcomeFailed, FailedStep: StepContextWindow, Reason: events.ReasonTurnFailed}}, nil
		}
		if !res.OK {
			return failTurn(ctx, o, FailTurnInput{TurnRef: ref, Reason: events.ReasonAllProvidersFailed, Attempts: len(begin.Providers)})
		}
		if res.Final {
			return turnResult{TurnResult: TurnResult{Outcome: OutcomeCompleted, LastSeq: res.LastSeq}, recorded: res.Recorded}, nil
		}
		held, err := requestApprovals(ctx, o, begin, ref, it, res.ToolCalls)
		if err != nil {
			return turnResult{}, err
		}
		for i, call := range res.ToolCalls {
			tool, ok := serverToolFor(call.Dispatch)
			if !ok {
				continue // client tools run in the harness
			}
			tin := ToolCallInput{TurnRef: ref, Iteration: it, Call: call}
			if pa := held[i]; pa != nil {
				if !pa.settled {
					o.step.set(ctx, ref.TurnID, fmt.Sprintf("waiting for approval %s of %s (%s) until %s", pa.id, call.Name, call.ID, stepTime(pa.deadline)))
				}
				run, err := o.gate.wait(ctx, pa)
				if err != nil {
					o.gate.cancelAll(ctx, held[i+1:], cancelKind(err))
					return turnResult{}, err
				}
				if !run {
					continue // its error result is stored
				}
				tin.ApprovalID = pa.id
			}
			o.step.toolCall(ctx, ref.TurnID, it, call)
			tr, err := tool.activity.run(toolCtx(ctx, tool.timeout, o), tin)
			if err != nil {
				return turnResult{}, err
			}
			if tr.Launch != nil && launch != nil {
				launch(*tr.Launch)
			}
		}
		fin, err := finishIteration.runLocal(dbCtx(ctx, o), FinishIterationInput{TurnRef: ref, Iteration: it, Calls: res.ToolCalls})
		if err != nil {
			return turnResult{}, err
		}
		if fin.Paused {
			return turnResult{TurnResult: TurnResult{Outcome: OutcomePaused, LastSeq: fin.LastSeq}}, nil
		}
	}
	return failTurn(ctx, o, FailTurnInput{TurnRef: ref, Reason: events.ReasonLoopLimit})
}

// requestApprovals stores the approval requests of an iteration's held
// calls, all before the first wait, so every decider sees them at once
// and may decide them in any order; held[i] is call i's, nil when it runs
// at once.
func requestApprovals(ctx workflow.Context, o turnOptions, begin BeginTurnResult, ref TurnRef, it int, calls []ToolCall) ([]*pendingApproval, error) {
	held := make([]*pendingApproval, len(calls))
	if o.gate == nil || !begin.Approvals {
		return held, nil
	}
	timed := workflow.GetVersion(ctx, changeApprovalDeadlines, workflow.DefaultVersion, versionApprovalDeadlines) >= versionApprovalDeadlines
	for i, call := range calls {
		if _, ok := serverToolFor(call.Dispatch); !ok {
			continue
		}
		pa, err := o.gate.request(ctx, o, ref, it, call)
		if err != nil {
			o.gate.cancelAll(ctx, held[:i], events.DecidedByInterrupt)
			return nil, err
		}
		held[i] = pa
	}
	if timed {
		// Every deadline runs from its request, not from when the turn
		// reaches its call.
		for _, pa := range held {
			if pa != nil && pa.claim == nil {
				o.gate.arm(ctx, pa)
			}
		}
	}
	return held, nil
}

// cancelKind is who ended a turn's wait: the close or an interrupt.
func cancelKind(err error) events.DeciderKind {
	if _, closed := sessionNotOpen(err); closed {
		return events.DecidedByClose
	}
	return events.DecidedByInterrupt
}

// budgetFailure ends a turn that a spent budget stopped before a provider
// call: logged as a failed turn, taken out of the conversation, the
// session still open.
func budgetFailure(ctx workflow.Context, o turnOptions, ref TurnRef, b BudgetSpent) (turnResult, error) {
	in := FailTurnInput{TurnRef: ref, Reason: events.ReasonTurnFailed, Step: StepBudget, Detail: b.Detail}
	if err := failTurnAct.runLocal(dbCtx(ctx, o), in); err != nil {
		return turnResult{}, err
	}
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeFailed, FailedStep: StepBudget, Reason: events.ReasonTurnFailed, Detail: b.Detail}}, nil
}

// StepBudget is the failed step of a turn a spent budget stopped.
const StepBudget = "budget"

// StepContextWindow is the failed step of a turn whose conversation fits no
// provider's context window however it is compacted.
const StepContextWindow = "context_window"

// firstAttempt is the outcome of a turn's first provider attempt when it
// ran together with the begin.
type firstAttempt struct {
	res CallProviderResult
	err error
}

// startTurn begins the turn: on its own, or (beginInAttempt) together with the
// first provider attempt, whose outcome is then returned as first. When that
// attempt failed, the begin's result is read back from where BeginTurn
// stored it.
func startTurn(ctx workflow.Context, in BeginTurnInput, o turnOptions) (BeginTurnResult, *firstAttempt, error) {
	if !o.beginInAttempt {
		b, err := beginTurn.runLocal(dbCtx(ctx, o), in)
		return b, nil, err
	}
	res, err := runAttempt(ctx, o, CallProviderInput{TurnRef: in.TurnRef, FailAsError: o.observable, Begin: &in, Compact: o.compaction, Budgets: o.budgets, Record: o.record})
	if _, failed := attemptFailure(err); failed {
		b, berr := beginTurn.runLocal(dbCtx(ctx, o), in)
		return b, &firstAttempt{err: err}, berr
	}
	if err != nil {
		return BeginTurnResult{}, nil, err
	}
	if res.Begin == nil {
		return BeginTurnResult{}, nil, temporal.NewNonRetryableApplicationError("first attempt returned no begin result", "MissingBegin", nil)
	}
	b := *res.Begin
	res.Begin = nil
	return b, &firstAttempt{res: res}, nil
}

func failTurn(ctx workflow.Context, o turnOptions, in FailTurnInput) (turnResult, error) {
	if err := failTurnAct.runLocal(dbCtx(ctx, o), in); err != nil {
		return turnResult{}, err
	}
	return turnResult{TurnResult: TurnResult{Outcome: OutcomeProvidersFailed, Reason: in.Reason}, sessionEnded: true}, nil
}

// sessionNotOpen reports an activity the store refused because the
// session is no longer open (ErrSessionNotOpen), with the session's state.
// Histories recorded before the store refused such appends hold no such
// failure, so they replay unchanged.
func sessionNotOpen(err error) (string, bool) {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrSessionNotOpen {
		return "", false
	}
	state := "closed"
	if ae.HasDetails() {
		_ = ae.Details(&state)
	}
	return state, true
}

// superseded reports a provider attempt that found its turn superseded
// (ErrTurnSuperseded). Histories recorded before the attempts were fenced
// hold no such failure, so they replay unchanged.
func superseded(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrTurnSuperseded
}

// versionSuperseded: a turn whose attempt found it superseded ends as
// OutcomeFailed (StepSuperseded) with nothing stored, instead of failing
// as a step past its retries (a session.error and a repair).
const (
	changeSuperseded  = "turn-superseded"
	versionSuperseded = 1
)

// StepSuperseded is the failed step of a turn whose provider attempt found
// that PostgreSQL had moved on from it.
const StepSuperseded = "superseded"

// attemptFailure reports a provider attempt that failed as an
// ErrProviderAttemptFailed activity failure (its events are stored; the walk
// moves on), with the failure's short detail.
func attemptFailure(err error) (string, bool) {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == ErrProviderAttemptFailed {
		return ae.Message(), true
	}
	return "", false
}
