// Package events is the one home of the session event log's vocabulary: the
// closed set of event types, the payload each one carries, the session.error
// reasons and the tool dispatch kinds. The server builds every event it
// stores from a payload type here, so an event's type cannot be misspelled
// and its payload shape cannot drift; the Go SDK re-exports the same names.
package events

// Type is the event_type of a session event.
type Type string

// The catalog of event types (BAE's message-type reference).
const (
	ClientMessageSend       Type = "client.message.send"
	ServerMessageSend       Type = "server.message.send"
	ProviderRequest         Type = "provider.request"
	ProviderResponse        Type = "provider.response"
	ToolCall                Type = "tool.call"
	ToolResult              Type = "tool.result"
	MCPRequest              Type = "mcp.request"
	MCPResponse             Type = "mcp.response"
	SandboxRequest          Type = "sandbox.request"
	SandboxResponse         Type = "sandbox.response"
	SessionOpen             Type = "session.open"
	SessionJoin             Type = "session.join"
	SessionDriverRegister   Type = "session.driver.register"
	SessionClose            Type = "session.close"
	SessionError            Type = "session.error"
	SessionCompaction       Type = "session.compaction" // reserved by the contract; bae-go's payload: CompactionPayload
	SessionSandboxAvailable Type = "session.sandbox.available"
	SessionSandboxStart     Type = "session.sandbox.start"
	SessionSandboxRunning   Type = "session.sandbox.running"
	SessionSandboxStop      Type = "session.sandbox.stop"
	SessionSandboxStopped   Type = "session.sandbox.stopped"
	SessionSandboxError     Type = "session.sandbox.error"
	SubagentStart           Type = "session.subagent.start"
	SubagentRunning         Type = "session.subagent.running"
	SubagentCompleted       Type = "session.subagent.completed"
	SubagentFailed          Type = "session.subagent.failed"
	SubagentCancelled       Type = "session.subagent.cancelled"
	// ServerMessageInterrupted ends a turn a driver or an operator
	// interrupted: the assistant's partial answer (bae-go only, see
	// docs/api.md; payload InterruptedMessage).
	ServerMessageInterrupted Type = "server.message.interrupted"
	// ApprovalRequest and ApprovalDecision: a server-side tool call held
	// for a person's decision, and that decision (bae-go only, see
	// docs/api.md; payloads in approvals.go).
	ApprovalRequest  Type = "approval.request"
	ApprovalDecision Type = "approval.decision"
)

// All returns every event type, in catalog order.
func All() []Type {
	return []Type{
		ClientMessageSend, ServerMessageSend, ProviderRequest, ProviderResponse,
		ToolCall, ToolResult, MCPRequest, MCPResponse, SandboxRequest, SandboxResponse,
		SessionOpen, SessionJoin, SessionDriverRegister, SessionClose, SessionError,
		SessionCompaction, SessionSandboxAvailable, SessionSandboxStart, SessionSandboxRunning,
		SessionSandboxStop, SessionSandboxStopped, SessionSandboxError,
		SubagentStart, SubagentRunning, SubagentCompleted, SubagentFailed, SubagentCancelled,
		ServerMessageInterrupted, ApprovalRequest, ApprovalDecision,
	}
}

// Known reports whether t is in the catalog.
func (t Type) Known() bool {
	for _, k := range All() {
		if k == t {
			return true
		}
	}
	return false
}

// FollowsClose reports whether an event of type t may be appended to a
// session that is no longer open (other than by the close itself, in its
// own transaction): the wind-down of what the session ran (its sandbox
// stopping, its subagents ending), which its cleanup and its clients report
// after the close. Nothing of a turn, and nothing that starts anything,
// comes after a session.close, except the cancellation of an approval the
// close ended (approval.decision, written by the close's own wind-down).
func (t Type) FollowsClose() bool {
	switch t {
	case SessionSandboxStop, SessionSandboxStopped, SessionSandboxError,
		SubagentCompleted, SubagentFailed, SubagentCancelled, ApprovalDecision:
		return true
	}
	return false
}

// Dispatch says who runs a tool call (tool.call / tool.result "dispatch").
type Dispatch string

// Tool dispatch kinds. A tool kind is defined here once; the turn loop routes
// on it and the events carry it.
const (
	DispatchClient   Dispatch = "client"
	DispatchMCP      Dispatch = "mcp"
	DispatchSandbox  Dispatch = "sandbox"
	DispatchSubagent Dispatch = "subagent"
)

// Placement says where a sandbox or subagent runs (the lifecycle events'
// "dispatch": the server's own containers, or the harness's machine).
type Placement string

// Sandbox and subagent placements.
const (
	PlacementRemote Placement = "remote"
	PlacementLocal  Placement = "local"
)

// Reason is a session.error reason.
type Reason string

// session.error reasons.
const (
	ReasonProviderConfig             Reason = "provider_config"
	ReasonProviderCallFailed         Reason = "provider_call_failed"
	ReasonAllProvidersFailed         Reason = "all_providers_failed"
	ReasonLoopLimit                  Reason = "loop_limit"
	ReasonProfileUnavailable         Reason = "profile_unavailable"
	ReasonPrimaryProviderUnavailable Reason = "primary_provider_unavailable"
	ReasonDriverTurnAbandoned        Reason = "driver_turn_abandoned"
	ReasonToolResultMergeInvalid     Reason = "tool_result_merge_invalid"
	// ReasonTurnFailed: a step of the turn failed past its retries; the
	// session stays open (bae-go only, see docs/api.md).
	ReasonTurnFailed Reason = "turn_failed"
)
