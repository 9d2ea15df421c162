package sdk

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bae-go/bae-go/events"
)

// EventType is the event_type of a session event: the server's closed set
// (package events), under the SDK's names.
type EventType = events.Type

// Every event_type of the message-type catalog.
const (
	EventClientMessageSend       = events.ClientMessageSend
	EventServerMessageSend       = events.ServerMessageSend
	EventProviderRequest         = events.ProviderRequest
	EventProviderResponse        = events.ProviderResponse
	EventToolCall                = events.ToolCall
	EventToolResult              = events.ToolResult
	EventMCPRequest              = events.MCPRequest
	EventMCPResponse             = events.MCPResponse
	EventSandboxRequest          = events.SandboxRequest
	EventSandboxResponse         = events.SandboxResponse
	EventSessionOpen             = events.SessionOpen
	EventSessionJoin             = events.SessionJoin
	EventSessionDriverRegister   = events.SessionDriverRegister
	EventSessionClose            = events.SessionClose
	EventSessionError            = events.SessionError
	EventSessionCompaction       = events.SessionCompaction
	EventSessionSandboxAvailable = events.SessionSandboxAvailable
	EventSessionSandboxStart     = events.SessionSandboxStart
	EventSessionSandboxRunning   = events.SessionSandboxRunning
	EventSessionSandboxStop      = events.SessionSandboxStop
	EventSessionSandboxStopped   = events.SessionSandboxStopped
	EventSessionSandboxError     = events.SessionSandboxError
	EventSubagentStart           = events.SubagentStart
	EventSubagentRunning         = events.SubagentRunning
	EventSubagentCompleted       = events.SubagentCompleted
	EventSubagentFailed          = events.SubagentFailed
	EventSubagentCancelled       = events.SubagentCancelled
	// EventServerMessageInterrupted ends an interrupted turn (a bae-go
	// extension; see InterruptedPayload).
	EventServerMessageInterrupted = events.ServerMessageInterrupted
	// EventApprovalRequest and EventApprovalDecision: a server-side tool
	// call held for a person's decision, and the decision (a bae-go
	// extension; only streams opted in with Bae-Approvals carry them).
	EventApprovalRequest  = events.ApprovalRequest
	EventApprovalDecision = events.ApprovalDecision
)

// EventTypes returns every known event type, in catalog order.
func EventTypes() []EventType { return events.All() }

// Event is one entry of a session's append-only event log.
type Event struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	// ClientKeyID is the acting client key; empty when the key was deleted.
	ClientKeyID string          `json:"client_key_id"`
	Type        EventType       `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"created_at"`
}

// Decode unmarshals the payload into v (e.g. a *Message for the two
// message events, or one of the *Payload types of this package).
func (e Event) Decode(v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("bae: decode %s payload: %w", e.Type, err)
	}
	return nil
}

// SessionErrorPayload is the payload of session.error.
type SessionErrorPayload struct {
	Reason           string `json:"reason"`
	Detail           string `json:"detail,omitempty"`
	OwnerClientKeyID string `json:"owner_client_key_id,omitempty"`
}

// Reasons carried by session.error.
const (
	ReasonProviderConfig             = string(events.ReasonProviderConfig)
	ReasonProviderCallFailed         = string(events.ReasonProviderCallFailed)
	ReasonAllProvidersFailed         = string(events.ReasonAllProvidersFailed)
	ReasonLoopLimit                  = string(events.ReasonLoopLimit)
	ReasonProfileUnavailable         = string(events.ReasonProfileUnavailable)
	ReasonPrimaryProviderUnavailable = string(events.ReasonPrimaryProviderUnavailable)
	ReasonDriverTurnAbandoned        = string(events.ReasonDriverTurnAbandoned)
	ReasonToolResultMergeInvalid     = string(events.ReasonToolResultMergeInvalid)
	ReasonTurnFailed                 = string(events.ReasonTurnFailed)
)

// ToolCallPayload is the payload of tool.call.
type ToolCallPayload struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input"`
	Dispatch   Dispatch        `json:"dispatch"`
	ServerName string          `json:"server_name"`
}

// ToolResultPayload is the payload of tool.result.
type ToolResultPayload struct {
	ToolUseID  string          `json:"tool_use_id"`
	Dispatch   Dispatch        `json:"dispatch"`
	ServerName string          `json:"server_name"`
	IsError    bool            `json:"is_error"`
	Content    json.RawMessage `json:"content"`
}

// reason extracts session.error's reason ("" for other events).
func (e Event) reason() string {
	if e.Type != EventSessionError {
		return ""
	}
	var p SessionErrorPayload
	_ = json.Unmarshal(e.Payload, &p)
	return p.Reason
}

// Describe renders a one-line, human-readable summary of an event.
func Describe(e Event) string {
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	str := func(k string) string {
		if s, ok := p[k].(string); ok {
			return s
		}
		if v, ok := p[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return "-"
	}
	base := describeType(e.Type)
	switch e.Type {
	case "":
		return "event without a type"
	case EventProviderRequest:
		return fmt.Sprintf("%s (attempt %s, %s)", base, str("attempt"), str("kind"))
	case EventProviderResponse, EventMCPResponse, EventSandboxResponse:
		return fmt.Sprintf("%s (ok=%s)", base, str("ok"))
	case EventToolCall:
		return fmt.Sprintf("%s %s (%s)", base, str("name"), str("dispatch"))
	case EventToolResult:
		return fmt.Sprintf("%s (%s, is_error=%s)", base, str("dispatch"), str("is_error"))
	case EventMCPRequest:
		return fmt.Sprintf("%s %s → %s", base, str("tool"), str("server_name"))
	case EventSandboxRequest:
		return fmt.Sprintf("%s %s", base, str("tool"))
	case EventSessionClose, EventSessionError:
		return fmt.Sprintf("%s (%s)", base, str("reason"))
	case EventSessionSandboxStart, EventSessionSandboxRunning, EventSessionSandboxStopped, EventSessionSandboxError:
		return fmt.Sprintf("%s (%s, %s)", base, str("image"), str("dispatch"))
	case EventSessionSandboxStop:
		return fmt.Sprintf("%s (%s)", base, str("reason"))
	case EventSubagentStart, EventSubagentRunning, EventSubagentCompleted:
		return fmt.Sprintf("%s (%s, %s)", base, str("harness"), str("dispatch"))
	case EventSubagentFailed, EventSubagentCancelled:
		return fmt.Sprintf("%s (%s, %s)", base, str("reason"), str("dispatch"))
	case EventServerMessageInterrupted:
		return fmt.Sprintf("%s (by %s)", base, str("by"))
	case EventApprovalRequest:
		return fmt.Sprintf("%s %s (%s)", base, str("tool_name"), str("approval_id"))
	case EventApprovalDecision:
		return fmt.Sprintf("%s %s (%s)", base, str("decision"), str("approval_id"))
	}
	if base == "" {
		return "unknown event " + string(e.Type)
	}
	return base
}

// describeType is the exhaustive table behind Known and Describe.
func describeType(t EventType) string {
	switch t {
	case EventClientMessageSend:
		return "client → server: user turn"
	case EventServerMessageSend:
		return "server → client: assistant turn"
	case EventProviderRequest:
		return "provider request"
	case EventProviderResponse:
		return "provider response"
	case EventToolCall:
		return "tool call"
	case EventToolResult:
		return "tool result"
	case EventMCPRequest:
		return "mcp request"
	case EventMCPResponse:
		return "mcp response"
	case EventSandboxRequest:
		return "sandbox request"
	case EventSandboxResponse:
		return "sandbox response"
	case EventSessionOpen:
		return "session opened"
	case EventSessionJoin:
		return "driver joined the session"
	case EventSessionDriverRegister:
		return "driver registered"
	case EventSessionClose:
		return "session closed"
	case EventSessionError:
		return "session error"
	case EventSessionCompaction:
		return "session compaction"
	case EventSessionSandboxAvailable:
		return "sandbox images available"
	case EventSessionSandboxStart:
		return "sandbox start requested"
	case EventSessionSandboxRunning:
		return "sandbox running"
	case EventSessionSandboxStop:
		return "sandbox stop requested"
	case EventSessionSandboxStopped:
		return "sandbox stopped"
	case EventSessionSandboxError:
		return "sandbox error"
	case EventSubagentStart:
		return "subagent start"
	case EventSubagentRunning:
		return "subagent running"
	case EventSubagentCompleted:
		return "subagent completed"
	case EventSubagentFailed:
		return "subagent failed"
	case EventSubagentCancelled:
		return "subagent cancelled"
	case EventServerMessageInterrupted:
		return "server → client: interrupted assistant turn"
	case EventApprovalRequest:
		return "tool call held for approval"
	case EventApprovalDecision:
		return "approval decided"
	}
	return ""
}
