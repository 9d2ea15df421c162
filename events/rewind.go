package events

// RewindPayload is session.rewind: a driver or an operator took the turns
// after a point out of the conversation the model sees. The turns' events
// stay in the log (this event follows them); what their tools did outside
// the conversation (sandbox commands, MCP calls, subagents) is not undone,
// and ToolCalls says what ran.
type RewindPayload struct {
	// RewindID names the request; a retried request stores one event.
	RewindID string `json:"rewind_id"`
	// ToEventSeq is the last event before the first rewound turn: the
	// conversation is again what it was there.
	ToEventSeq int64 `json:"to_event_seq"`
	// TurnIDs are the rewound turns, oldest first (never null).
	TurnIDs []string `json:"turn_ids"`
	// ToolCalls are the tool calls those turns made (never null).
	ToolCalls []RewoundToolCall `json:"tool_calls"`
	// InterruptedTurnID is the running or paused turn the rewind
	// interrupted first ("" for none).
	InterruptedTurnID string `json:"interrupted_turn_id,omitempty"`
	// ContextRestored: a rewound turn had compacted the conversation, and
	// the compaction state (summary, cleared tool results) is again what
	// it was at ToEventSeq.
	ContextRestored bool `json:"context_restored"`
	// MessageSeq is the conversation counter value the removal took (0
	// when the turns had no message in the conversation): a fork at an
	// event before this one inherits the conversation without the removal.
	MessageSeq int64 `json:"message_seq"`
	// By is the rewinding driver's client key id, or "operator" for the
	// admin route.
	By string `json:"by"`
}

// RewoundToolCall is one tool call a rewound turn made.
type RewoundToolCall struct {
	TurnID    string   `json:"turn_id"`
	ToolUseID string   `json:"tool_use_id"`
	Name      string   `json:"name"`
	Dispatch  Dispatch `json:"dispatch"`
	// ServerName is the MCP server, for MCP tools.
	ServerName *string `json:"server_name,omitempty"`
}

// EventType implements Payload.
func (RewindPayload) EventType() Type { return SessionRewind }
