package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bae-go/bae-go/events"
)

// ApprovalsHeader opts a sendMessage or subscribe stream into approval
// notifications (a bae-go extension; BAE servers ignore it).
const ApprovalsHeader = "Bae-Approvals"

// The approval notifications and the decision method.
const (
	approvalRequestMethod  = "session.approvalRequest"
	approvalDecisionMethod = "session.approvalDecision"
	methodDecideApproval   = "session.decideApproval"
)

// Deciders says who may decide an approval (the profile's policy).
type Deciders = events.Deciders

// Who may decide. Operators (admin API, console) always may.
const (
	DecidersAnyDriver  = events.DecidersAnyDriver
	DecidersTurnDriver = events.DecidersTurnDriver
	DecidersOperators  = events.DecidersOperators
)

// ApprovalState is how an approval ended.
type ApprovalState = events.Decision

// Outcomes of an approval.
const (
	ApprovalApproved  = events.DecisionApproved
	ApprovalRejected  = events.DecisionRejected
	ApprovalExpired   = events.DecisionExpired
	ApprovalCancelled = events.DecisionCancelled
)

// ApprovalToolCall is the server-side tool call waiting for a decision.
type ApprovalToolCall struct {
	ID string `json:"id"`
	// Kind is the call's dispatch: mcp, sandbox or subagent.
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Server string `json:"server,omitempty"`
	// Arguments are the call's arguments as the model gave them.
	Arguments json.RawMessage `json:"arguments"`
}

// ApprovalRequest is a session.approvalRequest notification: a turn is
// paused before a server-side tool call until someone decides.
type ApprovalRequest struct {
	ApprovalID string           `json:"approval_id"`
	TurnID     string           `json:"turn_id"`
	ToolCall   ApprovalToolCall `json:"tool_call"`
	Deciders   Deciders         `json:"deciders"`
	Deadline   time.Time        `json:"deadline"`
	// OnTimeout is what happens at the deadline: reject or approve.
	OnTimeout string `json:"on_timeout"`
}

// DecidedBy names who decided: kind driver (ClientID is its key id),
// operator (Operator is the name it gave, if any), deadline, interrupt or
// close.
type DecidedBy = events.DecidedBy

// ApprovalOutcome is a session.approvalDecision notification, and (Decision
// approved or rejected) the result of DecideApproval.
type ApprovalOutcome struct {
	ApprovalID string        `json:"approval_id"`
	Decision   ApprovalState `json:"decision"`
	// Arguments are the approved arguments when they were edited.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Message is the rejection text the model receives.
	Message   string    `json:"message,omitempty"`
	DecidedBy DecidedBy `json:"decided_by"`
}

// ApprovalDecision is a handler's (or DecideApproval's) answer: Approve,
// ApproveWith, Reject, or Abstain (the zero value) to leave the request to
// someone else.
type ApprovalDecision struct {
	decision  string // "approve", "reject"; "" abstains
	arguments json.RawMessage
	message   string
	err       error // ApproveWith's arguments did not encode
}

// Approve lets the call run with the model's arguments.
func Approve() ApprovalDecision { return ApprovalDecision{decision: "approve"} }

// ApproveWith lets the call run with edited arguments (a JSON object, or a
// value that encodes to one); the server checks them against the tool's
// input schema.
func ApproveWith(arguments any) ApprovalDecision {
	raw, err := json.Marshal(arguments)
	if err == nil && (len(raw) == 0 || raw[0] != '{') {
		err = fmt.Errorf("arguments must encode to a JSON object, got %.40s", raw)
	}
	return ApprovalDecision{decision: "approve", arguments: raw, err: err}
}

// Reject refuses the call; the model receives message as the tool's error
// result.
func Reject(message string) ApprovalDecision {
	return ApprovalDecision{decision: "reject", message: message}
}

// Abstain decides nothing: the request waits for another decider, an
// operator or its deadline.
func Abstain() ApprovalDecision { return ApprovalDecision{} }

// Abstains reports whether d leaves the request undecided.
func (d ApprovalDecision) Abstains() bool { return d.decision == "" }

// ApprovalHandler decides the approval requests this session's streams
// carry. It runs on the stream's goroutine: a slow handler delays the
// notifications behind it, never the turn (which waits for a decision).
type ApprovalHandler func(ctx context.Context, req ApprovalRequest) (ApprovalDecision, error)

// WithApprovalHandler opts the session's sendMessage and subscribe streams
// into approval notifications (the Bae-Approvals extension) and decides each
// request with h. A request the server already had decided by someone else
// (ErrApprovalNotPending) is not an error. A server without the extension
// sends none, and h never runs.
func WithApprovalHandler(h ApprovalHandler) Option {
	return func(o *options) { o.approvals = h }
}

// WithApprovalOutcomes opts the session's streams into approval
// notifications, like WithApprovalHandler, and hands every decision made on
// the session (by anyone, or by its deadline) to fn.
func WithApprovalOutcomes(fn func(ctx context.Context, out ApprovalOutcome) error) Option {
	return func(o *options) { o.outcomes = fn }
}

// The refusals of session.decideApproval, matched with errors.Is.
var (
	// ErrApprovalNotAllowed: the policy does not let this client decide
	// (-32001 approval_not_allowed).
	ErrApprovalNotAllowed = errors.New("approval_not_allowed")
	// ErrApprovalNotPending: the approval was already decided, expired or
	// cancelled (-32000 approval_not_pending); another decision won.
	ErrApprovalNotPending = errors.New("approval_not_pending")
	// ErrApprovalNotFound: no approval with that id in this session
	// (-32602 approval_not_found).
	ErrApprovalNotFound = errors.New("approval_not_found")
	// ErrApprovalArgumentsInvalid: edited arguments fail the tool's input
	// schema (-32602 approval_arguments_invalid).
	ErrApprovalArgumentsInvalid = errors.New("approval_arguments_invalid")
)

// ApprovalError is a refused decision: errors.Is matches one of the
// ErrApproval… values, errors.As the *RPCError underneath.
type ApprovalError struct {
	Reason error // one of the ErrApproval… values
	RPC    *RPCError
}

func (e *ApprovalError) Error() string { return "bae: decideApproval: " + e.RPC.Message }
func (e *ApprovalError) Is(target error) bool {
	return target == e.Reason
}
func (e *ApprovalError) Unwrap() error { return e.RPC }

// approvalError types a decideApproval refusal by its code and slug.
func approvalError(re *RPCError) error {
	for _, r := range []struct {
		code int
		err  error
	}{
		{CodeDriverNotRegistered, ErrApprovalNotAllowed},
		{CodeApplicationError, ErrApprovalNotPending},
		{CodeInvalidParams, ErrApprovalNotFound},
		{CodeInvalidParams, ErrApprovalArgumentsInvalid},
	} {
		if re.Code == r.code && strings.Contains(re.Message, r.err.Error()) {
			return &ApprovalError{Reason: r.err, RPC: re}
		}
	}
	return re
}

// DecideApproval decides a pending approval of this session
// (session.decideApproval): d is Approve(), ApproveWith(args) or
// Reject(message). A refusal is an *ApprovalError matching
// ErrApprovalNotAllowed, ErrApprovalNotPending, ErrApprovalNotFound or
// ErrApprovalArgumentsInvalid.
func (s *Session) DecideApproval(ctx context.Context, approvalID string, d ApprovalDecision) (ApprovalOutcome, error) {
	var out ApprovalOutcome
	switch {
	case approvalID == "":
		return out, errors.New("bae: DecideApproval needs an approval id")
	case d.err != nil:
		return out, fmt.Errorf("bae: DecideApproval: %w", d.err)
	case d.Abstains():
		return out, errors.New("bae: DecideApproval needs Approve, ApproveWith or Reject")
	}
	params := map[string]any{"approval_id": approvalID, "decision": d.decision}
	if len(d.arguments) > 0 {
		params["arguments"] = d.arguments
	}
	if d.decision == "reject" {
		params["message"] = d.message
	}
	err := s.call(ctx, methodDecideApproval, params, &out)
	var re *RPCError
	if errors.As(err, &re) {
		return out, approvalError(re)
	}
	return out, err
}

// approvalsOn reports whether this session's streams opt in.
func (s *Session) approvalsOn() bool { return s.approvals != nil || s.outcomes != nil }

// approvalHeader adds the opt-in to a stream's request headers.
func (s *Session) approvalHeader(h http.Header) http.Header {
	if !s.approvalsOn() {
		return h
	}
	if h == nil {
		h = http.Header{}
	}
	h.Set(ApprovalsHeader, "on")
	return h
}

// onApprovalFrame handles an approval notification; ok is false for any
// other frame. A request is handed to the handler once per Session, even
// when a Send and a Subscribe both carry it.
func (s *Session) onApprovalFrame(ctx context.Context, f *frame) (ok bool, err error) {
	switch f.Method {
	case approvalRequestMethod:
		var req ApprovalRequest
		if err := json.Unmarshal(f.Params, &req); err != nil {
			return true, fmt.Errorf("bae: decode %s: %w", approvalRequestMethod, err)
		}
		if s.approvals == nil || !s.firstSight(req.ApprovalID) {
			return true, nil
		}
		d, err := s.approvals(ctx, req)
		if err != nil {
			return true, &HookError{Hook: "ApprovalHandler", Err: err}
		}
		if d.Abstains() {
			return true, nil
		}
		_, err = s.DecideApproval(ctx, req.ApprovalID, d)
		if errors.Is(err, ErrApprovalNotPending) {
			s.Logger().DebugContext(ctx, "bae: approval already decided", "approval_id", req.ApprovalID)
			return true, nil
		}
		return true, err
	case approvalDecisionMethod:
		if s.outcomes == nil {
			return true, nil
		}
		var out ApprovalOutcome
		if err := json.Unmarshal(f.Params, &out); err != nil {
			return true, fmt.Errorf("bae: decode %s: %w", approvalDecisionMethod, err)
		}
		if err := s.outcomes(ctx, out); err != nil {
			return true, &HookError{Hook: "ApprovalOutcomes", Err: err}
		}
		return true, nil
	}
	return false, nil
}

// maxSeenApprovals bounds the ids remembered for deduplication.
const maxSeenApprovals = 1024

// firstSight records id and reports whether it is new.
func (s *Session) firstSight(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seenApprovals == nil {
		s.seenApprovals = map[string]bool{}
	}
	if s.seenApprovals[id] {
		return false
	}
	if len(s.seenApprovals) >= maxSeenApprovals {
		clear(s.seenApprovals)
	}
	s.seenApprovals[id] = true
	return true
}
