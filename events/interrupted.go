package events

import "encoding/json"

// InterruptedMessage is server.message.interrupted, the last event of an
// interrupted turn: the assistant message kept in the conversation (the
// text written before the interrupt, or InterruptedText when there was
// none), which tool calls were closed with an error result, and who asked.
type InterruptedMessage struct {
	Content json.RawMessage `json:"content"`
	// Partial is true when Content is what the provider had streamed.
	Partial bool `json:"partial"`
	// ClosedToolUseIDs are the tool_use ids answered with an error
	// tool.result by the interrupt (never null).
	ClosedToolUseIDs []string `json:"closed_tool_use_ids"`
	// By is the interrupting driver's client key id, or "operator" for
	// the admin route.
	By string `json:"by"`
}

// InterruptedBy is InterruptedMessage.By for an interrupt through the
// admin port.
const InterruptedBy = "operator"

// InterruptedText is the assistant text an interrupted turn keeps when
// nothing was written before the interrupt, and the content of the error
// tool_result that closes an interrupted tool call.
const InterruptedText = "[interrupted]"

// MarshalJSON adds the fixed role, as server.message.send has.
func (m InterruptedMessage) MarshalJSON() ([]byte, error) {
	ids := m.ClosedToolUseIDs
	if ids == nil {
		ids = []string{}
	}
	return json.Marshal(struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		Partial          bool            `json:"partial"`
		ClosedToolUseIDs []string        `json:"closed_tool_use_ids"`
		By               string          `json:"by"`
	}{"assistant", m.Content, m.Partial, ids, m.By})
}

// EventType implements Payload.
func (InterruptedMessage) EventType() Type { return ServerMessageInterrupted }
