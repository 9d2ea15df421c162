package events

import (
	"encoding/json"
	"fmt"
)

// Optional is a nullable string field: nil for "", else a pointer to s.
func Optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Payload is the payload of one event type; the type names the event.
type Payload interface {
	EventType() Type
}

// ClientMessage is client.message.send: the driver's user message.
type ClientMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ServerMessage is server.message.send: the assistant's message.
type ServerMessage struct {
	Content json.RawMessage `json:"content"`
}

// MarshalJSON adds the fixed role.
func (m ServerMessage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}{"assistant", m.Content})
}

// ProviderRequestPayload is provider.request: what one attempt sends.
type ProviderRequestPayload struct {
	Attempt   int    `json:"attempt"`
	Kind      string `json:"kind"`
	Provider  string `json:"provider"`
	BaseURL   string `json:"base_url"`
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	// Messages is nil when the store keeps them by reference
	// (store.NewEvent.MessagesAt); readers always get them.
	Messages any `json:"messages,omitempty"`
	Tools    any `json:"tools"`
	// ModelSettings are the model settings the request carried (bae-go's
	// extension, absent when none: a BAE profile's event is unchanged).
	ModelSettings any `json:"model_settings,omitempty"`
}

// ProviderResponsePayload is provider.response: one attempt's outcome.
// Status is null when no HTTP response arrived; Error is set on failure.
type ProviderResponsePayload struct {
	Attempt  int     `json:"attempt"`
	Kind     string  `json:"kind"`
	Provider *string `json:"provider"`
	OK       bool    `json:"ok"`
	Status   *int    `json:"status"`
	Error    string  `json:"error,omitempty"`
	Body     any     `json:"body"`
}

// ToolCallPayload is tool.call. ServerName is set for MCP tools only.
type ToolCallPayload struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Input      any      `json:"input"`
	Dispatch   Dispatch `json:"dispatch"`
	ServerName *string  `json:"server_name"`
}

// ToolResultPayload is tool.result.
type ToolResultPayload struct {
	ToolUseID  string
	Dispatch   Dispatch
	ServerName *string
	IsError    bool
	Content    any
}

// MarshalJSON leaves server_name out of sandbox results, as the contract's
// catalog shows them; the other dispatches carry it (null when not MCP).
func (p ToolResultPayload) MarshalJSON() ([]byte, error) {
	if p.Dispatch == DispatchSandbox {
		return json.Marshal(struct {
			ToolUseID string   `json:"tool_use_id"`
			Dispatch  Dispatch `json:"dispatch"`
			IsError   bool     `json:"is_error"`
			Content   any      `json:"content"`
		}{p.ToolUseID, p.Dispatch, p.IsError, p.Content})
	}
	return json.Marshal(struct {
		ToolUseID  string   `json:"tool_use_id"`
		Dispatch   Dispatch `json:"dispatch"`
		ServerName *string  `json:"server_name"`
		IsError    bool     `json:"is_error"`
		Content    any      `json:"content"`
	}{p.ToolUseID, p.Dispatch, p.ServerName, p.IsError, p.Content})
}

// MCPRequestPayload is mcp.request.
type MCPRequestPayload struct {
	Method     string  `json:"method"`
	ServerName *string `json:"server_name"`
	Tool       string  `json:"tool"`
	Input      any     `json:"input"`
}

// MCPResponsePayload is mcp.response: Result on success, Error otherwise.
type MCPResponsePayload struct {
	ServerName *string         `json:"server_name"`
	OK         bool            `json:"ok"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// SandboxRequestPayload is sandbox.request.
type SandboxRequestPayload struct {
	Tool    string `json:"tool"`
	Input   any    `json:"input"`
	Command any    `json:"command"`
}

// SandboxResponsePayload is sandbox.response; SandboxID is null when no
// sandbox was running.
type SandboxResponsePayload struct {
	SandboxID *string `json:"sandbox_id"`
	OK        bool    `json:"ok"`
	Result    any     `json:"result,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Declarations is session.open and session.join: what the client declared.
type Declarations struct {
	Join          bool     `json:"-"`
	ClientVersion *string  `json:"client_version"`
	Tools         []string `json:"tools"`
	SandboxTools  []string `json:"sandbox_tools"`
	SubagentTools []string `json:"subagent_tools"`
}

// DriverRegister is session.driver.register.
type DriverRegister struct{}

// SessionClosePayload is session.close.
type SessionClosePayload struct {
	Reason string `json:"reason"`
}

// Reasons carried by session.close.
const (
	CloseClientClose      = "client_close"
	CloseClientKeyRevoked = "client_key_revoked"
	// CloseImported ends, in the log, a session that was still open in the
	// BAE database it was imported from (baesrv import); bae-go's own.
	CloseImported = "imported"
	// CloseIdleTimeout: the server closed a session with no event for
	// BAE_SESSION_IDLE_TTL (a bae-go reason; the reference server never
	// closes a session by itself).
	CloseIdleTimeout = "idle_timeout"
)

// SessionErrorPayload is session.error. Only the fields of its reason are
// set; the rest are left out.
type SessionErrorPayload struct {
	Reason           Reason  `json:"reason"`
	Detail           string  `json:"detail,omitempty"`
	OwnerClientKeyID string  `json:"owner_client_key_id,omitempty"`
	ProfileID        string  `json:"profile_id,omitempty"`
	PrimaryProvider  string  `json:"primary_provider,omitempty"`
	Provider         string  `json:"provider,omitempty"`
	Attempts         *int    `json:"attempts,omitempty"`
	MaxIterations    *int    `json:"max_iterations,omitempty"`
	Step             *string `json:"step,omitempty"`
}

// SandboxAvailablePayload is session.sandbox.available.
type SandboxAvailablePayload struct {
	Images []SandboxImage `json:"images"`
}

// SandboxImage is one image of a profile and whether it is ready.
type SandboxImage struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// RemoteSandbox is a lifecycle event of a server-run sandbox (start,
// running, stop, stopped, error); fields a phase does not have stay out.
type RemoteSandbox struct {
	Kind      Type   `json:"-"`
	Image     string `json:"image"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Phase     string `json:"phase,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// MarshalJSON adds the placement.
func (p RemoteSandbox) MarshalJSON() ([]byte, error) {
	type plain RemoteSandbox
	return json.Marshal(struct {
		plain
		Dispatch Placement `json:"dispatch"`
	}{plain(p), PlacementRemote})
}

// LocalSandbox is a harness's report of its own sandbox (running, stopped
// or error); Image is null for unsandboxed host execution.
type LocalSandbox struct {
	Kind        Type    `json:"-"`
	Image       *string `json:"image"`
	Unsandboxed bool    `json:"unsandboxed"`
	ContainerID *string `json:"container_id"`
	Detail      *string `json:"detail"`
}

// MarshalJSON adds the placement.
func (p LocalSandbox) MarshalJSON() ([]byte, error) {
	type plain LocalSandbox
	return json.Marshal(struct {
		Dispatch Placement `json:"dispatch"`
		plain
	}{PlacementLocal, plain(p)})
}

// Subagent is a subagent lifecycle event (start, running, completed,
// failed, cancelled), remote or reported by a harness. Completed carries
// exit_code; failed carries reason and exit_code; cancelled carries reason
// (and exit_code when remote).
type Subagent struct {
	Kind       Type
	Placement  Placement
	SubagentID string
	Harness    string
	Model      string
	Detail     *string
	Reason     *string
	ExitCode   *int64
}

// MarshalJSON writes the fields the event's phase has.
func (p Subagent) MarshalJSON() ([]byte, error) {
	m := map[string]any{"dispatch": p.Placement, "subagent_id": p.SubagentID, "harness": p.Harness, "model": p.Model, "detail": p.Detail}
	switch p.Kind {
	case SubagentCompleted:
		m["exit_code"] = p.ExitCode
	case SubagentFailed:
		m["reason"], m["exit_code"] = p.Reason, p.ExitCode
	case SubagentCancelled:
		m["reason"] = p.Reason
		if p.Placement == PlacementRemote {
			m["exit_code"] = p.ExitCode
		}
	}
	return json.Marshal(m)
}

// Compaction layers (session.compaction "layer").
const (
	// LayerClearToolResults: older tool results' content became a marker.
	LayerClearToolResults = "clear_tool_results"
	// LayerSummary: the oldest turns became one summary.
	LayerSummary = "summary"
)

// Compaction triggers (session.compaction "trigger").
const (
	// TriggerBudget: the request's estimate passed the policy's trigger.
	TriggerBudget = "budget"
	// TriggerTooLong: the provider refused the request as too long.
	TriggerTooLong = "too_long"
)

// SeqRange is an inclusive range of sequence numbers.
type SeqRange struct {
	From    int64 `json:"from_seq"`
	Through int64 `json:"through_seq"`
}

// SummarizerUsage is what writing a summary cost.
type SummarizerUsage struct {
	Provider     string `json:"provider"`
	Model        string `json:"model"`
	InputTokens  int    `json:"input_tokens"`
	OutputTokens int    `json:"output_tokens"`
}

// CompactionPayload is session.compaction (BAE reserves the type; this is
// bae-go's definition, docs/api.md): the conversation a provider receives
// was compacted. The log itself keeps everything; this event says what the
// provider no longer sees verbatim from here on.
type CompactionPayload struct {
	// CompactionID names the compaction (its summary's key).
	CompactionID string `json:"compaction_id"`
	Layer        string `json:"layer"`
	Trigger      string `json:"trigger"`
	// Provider is the entry whose budget the request had to fit.
	Provider string `json:"provider"`
	// Events is the range of this session's events the compaction covers.
	Events SeqRange `json:"events"`
	// Messages is the range of stored conversation messages it covers.
	Messages SeqRange `json:"messages"`
	// TokensBefore and TokensAfter are the request's estimated input
	// tokens; Budget is what it had to fit.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	Budget       int `json:"budget"`
	// Summary (layer summary) is the text that stands for the range.
	Summary    string           `json:"summary,omitempty"`
	Summarizer *SummarizerUsage `json:"summarizer,omitempty"`
	// ClearedToolResults (layer clear_tool_results) are the tool_use ids
	// whose results were cleared.
	ClearedToolResults []string `json:"cleared_tool_results,omitempty"`
	// Fallback says why a summary was not written and results were
	// cleared instead.
	Fallback string `json:"fallback,omitempty"`
}

// EventType implementations: the one place a payload is tied to its type.

func (CompactionPayload) EventType() Type { return SessionCompaction }

func (ClientMessage) EventType() Type           { return ClientMessageSend }
func (ServerMessage) EventType() Type           { return ServerMessageSend }
func (ProviderRequestPayload) EventType() Type  { return ProviderRequest }
func (ProviderResponsePayload) EventType() Type { return ProviderResponse }
func (ToolCallPayload) EventType() Type         { return ToolCall }
func (ToolResultPayload) EventType() Type       { return ToolResult }
func (MCPRequestPayload) EventType() Type       { return MCPRequest }
func (MCPResponsePayload) EventType() Type      { return MCPResponse }
func (SandboxRequestPayload) EventType() Type   { return SandboxRequest }
func (SandboxResponsePayload) EventType() Type  { return SandboxResponse }
func (DriverRegister) EventType() Type          { return SessionDriverRegister }
func (SessionClosePayload) EventType() Type     { return SessionClose }
func (SessionErrorPayload) EventType() Type     { return SessionError }
func (SandboxAvailablePayload) EventType() Type { return SessionSandboxAvailable }
func (p RemoteSandbox) EventType() Type         { return mustBe(p.Kind, sandboxLifecycle) }
func (p LocalSandbox) EventType() Type          { return mustBe(p.Kind, localSandboxReports) }
func (p Subagent) EventType() Type              { return mustBe(p.Kind, subagentLifecycle) }

// EventType is session.join for a join, session.open otherwise.
func (d Declarations) EventType() Type {
	if d.Join {
		return SessionJoin
	}
	return SessionOpen
}

var (
	sandboxLifecycle    = []Type{SessionSandboxStart, SessionSandboxRunning, SessionSandboxStop, SessionSandboxStopped, SessionSandboxError}
	localSandboxReports = []Type{SessionSandboxRunning, SessionSandboxStopped, SessionSandboxError}
	subagentLifecycle   = []Type{SubagentStart, SubagentRunning, SubagentCompleted, SubagentFailed, SubagentCancelled}
)

// mustBe guards the payloads shared by a family of types: a kind outside
// the family is a programming error, caught by the first test that emits it.
func mustBe(t Type, family []Type) Type {
	for _, f := range family {
		if f == t {
			return t
		}
	}
	panic(fmt.Sprintf("events: %q is not a valid type for this payload", t))
}
