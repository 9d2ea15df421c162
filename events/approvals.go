package events

import "encoding/json"

// ApprovalRequestPayload is approval.request: a server-side tool call the
// profile's approval policy holds until someone decides (bae-go only, see
// docs/api.md). Arguments are the call's input as the model gave it.
type ApprovalRequestPayload struct {
	ApprovalID string          `json:"approval_id"`
	TurnID     string          `json:"turn_id"`
	ToolCallID string          `json:"tool_call_id"`
	ToolKind   Dispatch        `json:"tool_kind"`
	ToolName   string          `json:"tool_name"`
	Server     *string         `json:"server,omitempty"`
	Arguments  json.RawMessage `json:"arguments"`
	Deciders   Deciders        `json:"deciders"`
	// Deadline is RFC 3339.
	Deadline  string    `json:"deadline"`
	OnTimeout OnTimeout `json:"on_timeout"`
}

// ApprovalDecisionPayload is approval.decision: how a request ended and
// who ended it. Arguments are the approved ones when a decider edited
// them; Message is the text the model receives for a rejection.
type ApprovalDecisionPayload struct {
	ApprovalID string          `json:"approval_id"`
	Decision   Decision        `json:"decision"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Message    string          `json:"message,omitempty"`
	DecidedBy  DecidedBy       `json:"decided_by"`
}

// Deciders says who may decide an approval.
type Deciders string

// Who may decide. Operators (admin API, console) may always decide.
const (
	DecidersAnyDriver  Deciders = "any_driver"
	DecidersTurnDriver Deciders = "turn_driver"
	DecidersOperators  Deciders = "operators"
)

// OnTimeout is what a request's deadline decides.
type OnTimeout string

// Deadline outcomes.
const (
	OnTimeoutReject  OnTimeout = "reject"
	OnTimeoutApprove OnTimeout = "approve"
)

// Decision is how an approval request ended.
type Decision string

// Approval decisions (an approval's state once it is no longer pending).
const (
	DecisionApproved  Decision = "approved"
	DecisionRejected  Decision = "rejected"
	DecisionExpired   Decision = "expired"
	DecisionCancelled Decision = "cancelled"
)

// DeciderKind says what ended an approval request.
type DeciderKind string

// What ends an approval request.
const (
	DecidedByDriver    DeciderKind = "driver"
	DecidedByOperator  DeciderKind = "operator"
	DecidedByDeadline  DeciderKind = "deadline"
	DecidedByInterrupt DeciderKind = "interrupt"
	DecidedByClose     DeciderKind = "close"
)

// DecidedBy names who (or what) decided: a driver's client key id, or an
// operator's self-reported name.
type DecidedBy struct {
	Kind     DeciderKind `json:"kind"`
	ClientID string      `json:"client_id,omitempty"`
	Operator string      `json:"operator,omitempty"`
}

// ExpiredRejection is the error tool_result text of a call whose approval
// deadline passed with on_timeout reject.
const ExpiredRejection = "The tool call was not approved before its deadline; it did not run."

// RejectedText is the error tool_result text of a rejected call: the
// decider's message, or a plain notice when they gave none.
func RejectedText(message string) string {
	if message == "" {
		return "The tool call was rejected by a reviewer; it did not run."
	}
	return "The tool call was rejected by a reviewer; it did not run. Reviewer's message: " + message
}

func (ApprovalRequestPayload) EventType() Type  { return ApprovalRequest }
func (ApprovalDecisionPayload) EventType() Type { return ApprovalDecision }
