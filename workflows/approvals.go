package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/events"
)

// versionApprovals: a turn whose profile has an approval policy asks
// RequestApproval before each server-side call, and a held call waits in
// the workflow for the DecideApproval update or its deadline's timer.
// Histories recorded before it run every call at once.
const (
	changeApprovals  = "approvals"
	versionApprovals = 1
)

// versionApprovalDeadlines: each held call's deadline is a timer of its
// own, started once the model response's requests are stored, so a later
// call expires at its deadline while an earlier one still waits. Before
// it a call's timer started only when the turn reached the call, and a
// call whose deadline had passed by then waited for a decision.
const (
	changeApprovalDeadlines  = "approval-deadlines"
	versionApprovalDeadlines = 1
)

// UpdateDecideApproval decides a pending approval (see decideApproval).
const UpdateDecideApproval = "DecideApproval"

// Application error types of a refused DecideApproval; only api/ turns
// them into wire errors.
const (
	ErrApprovalNotPending = "ApprovalNotPending"
	ErrApprovalNotAllowed = "ApprovalNotAllowed"
)

// ApprovalDecisionInput is the DecideApproval update argument. The caller
// (api/) has checked the decider against the session and validated edited
// arguments against the tool's input schema; the workflow re-checks who
// may decide against what it holds.
type ApprovalDecisionInput struct {
	ApprovalID string
	Approve    bool
	// Arguments replace the model's when approving with edits.
	Arguments json.RawMessage `json:",omitempty"`
	// Message is the rejection text the model receives.
	Message string `json:",omitempty"`
	By      events.DecidedBy
}

// ApprovalDecisionResult is the DecideApproval update result.
type ApprovalDecisionResult struct {
	Decision events.Decision
	By       events.DecidedBy
}

// RequestApprovalInput asks whether a server-side call is held, and stores
// its request when it is.
type RequestApprovalInput struct {
	TurnRef
	Iteration int
	Call      ToolCall
}

// RequestApprovalResult says whether (and how) the call waits.
type RequestApprovalResult struct {
	Needed     bool
	ApprovalID string           `json:",omitempty"`
	Deciders   events.Deciders  `json:",omitempty"`
	Deadline   time.Time        `json:",omitempty"`
	OnTimeout  events.OnTimeout `json:",omitempty"`
	// State is the stored state when the request already existed and was
	// decided (the request was stored by an earlier run of this step).
	State string `json:",omitempty"`
}

// SettleApprovalInput stores an approval's decision: the approval.decision
// event, and for a call that will not run its error tool.result.
type SettleApprovalInput struct {
	TurnRef
	Iteration  int
	Call       ToolCall
	ApprovalID string
	Decision   events.Decision
	Arguments  json.RawMessage `json:",omitempty"`
	Message    string          `json:",omitempty"`
	By         events.DecidedBy
	// Rejected: the call does not run, and the model gets Message (or the
	// deadline's notice) as the call's error result. A cancelled call is
	// closed by whatever cancelled it.
	Rejected bool `json:",omitempty"`
}

// pendingApproval is a held call of the running turn. claim is set, once,
// by whoever decides it first (the update, the deadline, an interrupt or
// the close); settled once its decision is stored.
type pendingApproval struct {
	id         string
	turnDriver string
	deciders   events.Deciders
	deadline   time.Time
	onTimeout  events.OnTimeout
	in         SettleApprovalInput
	claim      *SettleApprovalInput
	settled    bool
	err        error
	// stopTimer cancels the deadline's own timer (versionApprovalDeadlines;
	// nil before it, when the wait times itself).
	stopTimer workflow.CancelFunc
}

// approvalValidation is DecideApproval's validator. A decision for an
// approval this run does not hold yet is admitted while a turn runs: a
// worker lost before its workflow task completed leaves the request stored
// in PostgreSQL (and shown pending) but not in history, and the turn
// recovering that task stores it again (idempotently) before it waits; a
// decision arriving in between would otherwise be refused as not pending.
// The handler waits for the request and checks the decision then.
func (s *session) approvalValidation(in ApprovalDecisionInput) error {
	if s.approvals[in.ApprovalID] == nil && s.live != nil && !s.closed {
		return nil
	}
	return s.approvalRefusal(in)
}

// refusal re-checks a decision against what the workflow holds: the
// approval is still pending, and the decider is one the policy allows
// (operators always are).
func (s *session) approvalRefusal(in ApprovalDecisionInput) error {
	pa := s.approvals[in.ApprovalID]
	if pa == nil || pa.claim != nil {
		return temporal.NewNonRetryableApplicationError("the approval is not pending", ErrApprovalNotPending, nil)
	}
	switch in.By.Kind {
	case events.DecidedByOperator:
		return nil
	case events.DecidedByDriver:
	default:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%q cannot decide", in.By.Kind), ErrApprovalNotAllowed, nil)
	}
	switch pa.deciders {
	case events.DecidersOperators:
		return temporal.NewNonRetryableApplicationError("only operators may decide this approval", ErrApprovalNotAllowed, nil)
	case events.DecidersTurnDriver:
		if in.By.ClientID != pa.turnDriver {
			return temporal.NewNonRetryableApplicationError("only the driver whose message started the turn may decide this approval", ErrApprovalNotAllowed, nil)
		}
	}
	if in.By.ClientID == "" {
		return temporal.NewNonRetryableApplicationError("a driver's decision must name its client key", ErrApprovalNotAllowed, nil)
	}
	return nil
}

// decideApproval is the DecideApproval update handler. The validator
// refuses a decision that cannot win, so it never reaches history; the
// handler checks again because two updates delivered in one workflow task
// are both validated before either handler runs. The first to claim the
// approval wins; the handler returns once its decision is stored.
func (s *session) decideApproval(ctx workflow.Context, in ApprovalDecisionInput) (ApprovalDecisionResult, error) {
	if s.approvals[in.ApprovalID] == nil {
		// Admitted by approvalValidation while the running turn had not
		// (yet again) requested it: wait for the request or the turn's end.
		if err := workflow.Await(ctx, func() bool { return s.approvals[in.ApprovalID] != nil || s.live == nil || s.closed }); err != nil {
			return ApprovalDecisionResult{}, err
		}
	}
	if err := s.approvalRefusal(in); err != nil {
		return ApprovalDecisionResult{}, err
	}
	pa := s.approvals[in.ApprovalID]
	claim := pa.in
	claim.By = in.By
	if in.Approve {
		claim.Decision, claim.Arguments = events.DecisionApproved, in.Arguments
	} else {
		claim.Decision, claim.Message, claim.Rejected = events.DecisionRejected, in.Message, true
	}
	pa.claim = &claim
	s.settleApproval(ctx, pa)
	if pa.err != nil {
		return ApprovalDecisionResult{}, pa.err
	}
	return ApprovalDecisionResult{Decision: claim.Decision, By: claim.By}, nil
}

// settleApproval stores a claimed decision (SettleApproval) on a context
// no interrupt cancels: a decision taken is always recorded.
func (s *session) settleApproval(ctx workflow.Context, pa *pendingApproval) {
	if pa.stopTimer != nil {
		pa.stopTimer() // decided before its deadline (a no-op once it fired)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	pa.err = settleApproval.runLocal(dbCtx(dctx, s.turnOptions()), *pa.claim)
	pa.settled = true
}

// approvalGate holds a turn's server-side calls for their approvals.
type approvalGate struct {
	s *session
}

// request stores the call's approval request when the profile's policy
// holds it; nil when the call runs at once.
func (g *approvalGate) request(ctx workflow.Context, o turnOptions, ref TurnRef, it int, call ToolCall) (*pendingApproval, error) {
	// Not cancelled by an interrupt: a request stored is always known to
	// the workflow, so the interrupt's wait below records its end instead
	// of leaving it pending.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	r, err := requestApproval.runLocal(dbCtx(dctx, o), RequestApprovalInput{TurnRef: ref, Iteration: it, Call: call})
	if err != nil || !r.Needed {
		return nil, err
	}
	pa := &pendingApproval{id: r.ApprovalID, turnDriver: ref.ClientKeyID, deciders: r.Deciders, deadline: r.Deadline, onTimeout: r.OnTimeout,
		in: SettleApprovalInput{TurnRef: ref, Iteration: it, Call: call, ApprovalID: r.ApprovalID}}
	if r.State != "" {
		// Decided already (stored by an earlier run of this turn step).
		pa.claim = &SettleApprovalInput{Decision: events.Decision(r.State)}
		pa.settled = true
		return pa, nil
	}
	g.s.approvals[pa.id] = pa
	return pa, nil
}

// arm starts the timer of a stored request's deadline: when it fires
// before anyone decides (or the turn ends), the call expires, whether or
// not the turn has reached it yet.
func (g *approvalGate) arm(ctx workflow.Context, pa *pendingApproval) {
	tctx, stop := workflow.WithCancel(ctx)
	pa.stopTimer = stop
	timer := workflow.NewTimer(tctx, pa.deadline.Sub(workflow.Now(ctx)))
	workflow.Go(ctx, func(gctx workflow.Context) {
		if err := timer.Get(gctx, nil); err != nil || pa.claim != nil || g.s.closed {
			return // decided, interrupted or closed first
		}
		g.expire(gctx, pa)
	})
}

// expire claims the call for its deadline and stores it expired.
func (g *approvalGate) expire(ctx workflow.Context, pa *pendingApproval) {
	claim := pa.in
	claim.Decision, claim.By = events.DecisionExpired, events.DecidedBy{Kind: events.DecidedByDeadline}
	claim.Rejected = pa.onTimeout != events.OnTimeoutApprove
	pa.claim = &claim
	g.s.settleApproval(ctx, pa)
}

// wait holds the call until its approval is decided, its deadline's timer
// fires, the turn is interrupted or the session closes. It reports whether
// the call may run. The wait holds no activity and no worker slot: the
// workflow sleeps on its timer until an update or a signal wakes it.
func (g *approvalGate) wait(ctx workflow.Context, pa *pendingApproval) (bool, error) {
	s := g.s
	defer delete(s.approvals, pa.id)
	if pa.claim == nil {
		remaining := pa.deadline.Sub(workflow.Now(ctx))
		decided := true
		var err error
		switch {
		case pa.stopTimer != nil:
			// Its own timer expires it (arm).
			err = workflow.Await(ctx, func() bool { return pa.claim != nil || s.closed })
		case remaining > 0:
			decided, err = workflow.AwaitWithTimeout(ctx, remaining, func() bool { return pa.claim != nil || s.closed })
		}
		switch {
		case err != nil:
			// Interrupted: ctx is cancelled.
			g.cancel(ctx, pa, events.DecidedByInterrupt)
			return false, err
		case pa.claim == nil && s.closed:
			g.cancel(ctx, pa, events.DecidedByClose)
			return false, temporal.NewNonRetryableApplicationError("session closed while an approval was pending", ErrSessionNotOpen, nil, s.endState)
		case pa.claim == nil && !decided:
			g.expire(ctx, pa)
		}
	}
	if err := workflow.Await(ctx, func() bool { return pa.settled }); err != nil {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		_ = workflow.Await(dctx, func() bool { return pa.settled })
		return false, err
	}
	if pa.err != nil {
		return false, pa.err
	}
	switch pa.claim.Decision {
	case events.DecisionApproved:
		return true, nil
	case events.DecisionExpired:
		return pa.onTimeout == events.OnTimeoutApprove, nil
	}
	return false, nil
}

// cancel ends a pending approval that an interrupt or the close ended. A
// decision already claimed is stored as it is; the call does not run.
func (g *approvalGate) cancel(ctx workflow.Context, pa *pendingApproval, kind events.DeciderKind) {
	if pa.claim == nil {
		claim := pa.in
		claim.Decision, claim.By = events.DecisionCancelled, events.DecidedBy{Kind: kind}
		if kind == events.DecidedByInterrupt && g.s.live != nil && g.s.live.by != events.InterruptedBy {
			claim.By.ClientID = g.s.live.by
		}
		pa.claim = &claim
		g.s.settleApproval(ctx, pa)
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(dctx, func() bool { return pa.settled })
}

// cancelAll ends the approvals a turn requested but had not waited on yet.
func (g *approvalGate) cancelAll(ctx workflow.Context, pending []*pendingApproval, kind events.DeciderKind) {
	for _, pa := range pending {
		if pa == nil || pa.settled {
			continue
		}
		g.cancel(ctx, pa, kind)
		delete(g.s.approvals, pa.id)
	}
}
