package sdk

import (
	"encoding/json"
	"fmt"
	"time"
)

// EventType is the event_type of a session event: a closed set.
type EventType string

// Every event_type of the message-type catalog.
const (
	EventClientMessageSend       EventType = "client.message.send"
	EventServerMessageSend       EventType = "server.message.send"
	EventProviderRequest         EventType = "provider.request"
	EventProviderResponse        EventType = "provider.response"
	EventToolCall                EventType = "tool.call"
	EventToolResult              EventType = "tool.result"
	EventMCPRequest              EventType = "mcp.request"
	EventMCPResponse             EventType = "mcp.response"
	EventSandboxRequest          EventType = "sandbox.request"
	EventSandboxResponse         EventType = "sandbox.response"
	EventSessionOpen             EventType = "session.open"
	EventSessionJoin             EventType = "session.join"
	EventSessionDriverRegister   EventType = "session.driver.register"
	EventSessionClose            EventType = "session.close"
	EventSessionError            EventType = "session.error"
	EventSessionCompaction       EventType = "session.compaction" // reserved, not emitted yet
	EventSessionSandboxAvailable EventType = "session.sandbox.available"
	EventSessionSandboxStart     EventType = "session.sandbox.start"
	EventSessionSandboxRunning   EventType = "session.sandbox.running"
	EventSessionSandboxStop      EventType = "session.sandbox.stop"
	EventSessionSandboxStopped   EventType = "session.sandbox.stopped"
	EventSessionSandboxError     EventType = "session.sandbox.error"
	EventSubagentStart           EventType = "session.subagent.start"
	EventSubagentRunning         EventType = "session.subagent.running"
	EventSubagentCompleted       EventType = "session.subagent.completed"
	EventSubagentFailed          EventType = "session.subagent.failed"
	EventSubagentCancelled       EventType = "session.subagent.cancelled"
)

// EventTypes returns every known event type, in catalog order.
func EventTypes() []EventType {
	return []EventType{
		EventClientMessageSend, EventServerMessageSend, EventProviderRequest, EventProviderResponse,
		EventToolCall, EventToolResult, EventMCPRequest, EventMCPResponse, EventSandboxRequest,
		EventSandboxResponse, EventSessionOpen, EventSessionJoin, EventSessionDriverRegister,
		EventSessionClose, EventSessionError, EventSessionCompaction, EventSessionSandboxAvailable,
		EventSessionSandboxStart, EventSessionSandboxRunning, EventSessionSandboxStop,
		EventSessionSandboxStopped, EventSessionSandboxError, EventSubagentStart, EventSubagentRunning,
		EventSubagentCompleted, EventSubagentFailed, EventSubagentCancelled,
	}
}

// Known reports whether t is in the catalog.
func (t EventType) Known() bool { return describeType(t) != "" }

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
	ReasonProviderConfig             = "provider_config"
	ReasonProviderCallFailed         = "provider_call_failed"
	ReasonAllProvidersFailed         = "all_providers_failed"
	ReasonLoopLimit                  = "loop_limit"
	ReasonProfileUnavailable         = "profile_unavailable"
	ReasonPrimaryProviderUnavailable = "primary_provider_unavailable"
	ReasonDriverTurnAbandoned        = "driver_turn_abandoned"
	ReasonToolResultMergeInvalid     = "tool_result_merge_invalid"
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
	}
	return ""
}
