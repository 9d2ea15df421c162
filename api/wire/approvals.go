package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ApprovalsHeader opts a session.sendMessage or session.subscribe stream
// into approval notifications (a bae-go extension): "on". Without it the
// stream carries nothing of approvals, as BAE's would not.
const ApprovalsHeader = "Bae-Approvals"

// The approval notifications of an opted-in stream, and the method that
// decides.
const (
	ApprovalRequestMethod  = "session.approvalRequest"
	ApprovalDecisionMethod = "session.approvalDecision"
	DecideApprovalMethod   = "session.decideApproval"
)

// MaxApprovalMessageBytes bounds a rejection's message (the model reads it).
const MaxApprovalMessageBytes = 16 << 10

// ParseApprovals reads the ApprovalsHeader: absent is off.
func ParseApprovals(values []string) (bool, *Error) {
	switch len(values) {
	case 0:
		return false, nil
	case 1:
	default:
		return false, invalid("more than one %s header", ApprovalsHeader)
	}
	switch strings.TrimSpace(values[0]) {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, invalid(`%s must be "on" or "off"`, ApprovalsHeader)
}

// ToolCall is a held call as approvals show it: Kind is its dispatch
// (mcp, sandbox, subagent, as tool.call says it).
type ToolCall struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	Server    *string         `json:"server,omitempty"`
	Arguments json.RawMessage `json:"arguments"`
}

// DecidedBy names who decided an approval.
type DecidedBy struct {
	Kind     string `json:"kind"`
	ClientID string `json:"client_id,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// ApprovalDecision is a decided approval's decision.
type ApprovalDecision struct {
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Message   string          `json:"message,omitempty"`
	DecidedBy DecidedBy       `json:"decided_by"`
	DecidedAt string          `json:"decided_at"`
}

// Approval is an approval as the admin API shows it.
type Approval struct {
	ID          string            `json:"id"`
	SessionID   string            `json:"session_id"`
	TurnID      string            `json:"turn_id"`
	ToolCall    ToolCall          `json:"tool_call"`
	Deciders    string            `json:"deciders"`
	Deadline    string            `json:"deadline"`
	OnTimeout   string            `json:"on_timeout"`
	State       string            `json:"state"`
	Decision    *ApprovalDecision `json:"decision,omitempty"`
	RequestedAt string            `json:"requested_at"`
	// Context is the session's events up to the request (single reads).
	Context []json.RawMessage `json:"context,omitempty"`
}

// ApprovalRequestNote is the params of a session.approvalRequest
// notification.
type ApprovalRequestNote struct {
	ApprovalID string   `json:"approval_id"`
	TurnID     string   `json:"turn_id"`
	ToolCall   ToolCall `json:"tool_call"`
	Deciders   string   `json:"deciders"`
	Deadline   string   `json:"deadline"`
	OnTimeout  string   `json:"on_timeout"`
}

// Decide is a decision as session.decideApproval params or the admin
// decision body carry it.
type Decide struct {
	ApprovalID string
	Approve    bool
	Arguments  json.RawMessage
	Message    string
	// Operator is the admin body's self-reported operator name.
	Operator string
}

// ParseDecide validates a decision: decision "approve" (optionally with
// edited "arguments", an object) or "reject" (optionally with a
// "message"). withID requires approval_id (the JSON-RPC params);
// withOperator allows "operator" (the admin body).
func ParseDecide(raw json.RawMessage, withID, withOperator bool) (Decide, error) {
	var d Decide
	var fields map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &fields) != nil {
		return d, fmt.Errorf("params must be an object")
	}
	str := func(k string) (string, bool, error) {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", true, fmt.Errorf("%s must be a string", k)
		}
		return s, true, nil
	}
	for k := range fields {
		switch k {
		case "decision", "arguments", "message":
		case "approval_id":
			if !withID {
				return d, fmt.Errorf("unknown field %q", k)
			}
		case "operator":
			if !withOperator {
				return d, fmt.Errorf("unknown field %q", k)
			}
		default:
			return d, fmt.Errorf("unknown field %q", k)
		}
	}
	if withID {
		id, ok, err := str("approval_id")
		if err != nil || !ok || id == "" || len(id) > MaxNameBytes {
			return d, fmt.Errorf("approval_id must be a non-empty string")
		}
		d.ApprovalID = id
	}
	decision, _, err := str("decision")
	if err != nil {
		return d, err
	}
	switch decision {
	case "approve":
		d.Approve = true
	case "reject":
	default:
		return d, fmt.Errorf(`decision must be "approve" or "reject"`)
	}
	if v, ok := fields["arguments"]; ok && string(v) != "null" {
		if !d.Approve {
			return d, fmt.Errorf("arguments go with decision approve only")
		}
		if t := bytes.TrimSpace(v); len(t) == 0 || t[0] != '{' {
			return d, fmt.Errorf("arguments must be an object")
		}
		d.Arguments = v
	}
	msg, ok, err := str("message")
	if err != nil {
		return d, err
	}
	if ok && d.Approve {
		return d, fmt.Errorf("message goes with decision reject only")
	}
	if len(msg) > MaxApprovalMessageBytes {
		return d, fmt.Errorf("message must be at most %d bytes", MaxApprovalMessageBytes)
	}
	d.Message = msg
	if withOperator {
		op, _, err := str("operator")
		if err != nil {
			return d, err
		}
		if len(op) > MaxNameBytes || strings.IndexFunc(op, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return d, fmt.Errorf("operator must be at most %d bytes without control characters", MaxNameBytes)
		}
		d.Operator = op
	}
	return d, nil
}
