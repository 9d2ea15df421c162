package fakeprovider

import (
	"fmt"
	"strings"
)

// Strict makes the fake refuse, as a real provider does (HTTP 400), a
// request whose conversation leaves a tool call unanswered: a tool_use
// (tool_calls) not answered by a tool_result (tool message) right after
// it, a result that answers no call of the message before, or a blank
// text block. A refused request is recorded and consumes no queued reply.
func (s *Server) Strict(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.strict = on
}

// StrictRefusals is how many requests Strict refused.
func (s *Server) StrictRefusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.strictRefusals
}

// ConversationError is why a provider would refuse the request's
// conversation (nil when it is valid); see Strict.
func ConversationError(rec Recorded) error {
	if rec.Format == OpenAI {
		return openAIConversationError(rec.Messages())
	}
	return anthropicConversationError(rec.Messages())
}

func blocksOf(content any) []map[string]any {
	arr, _ := content.([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, b := range arr {
		if m, ok := b.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func anthropicConversationError(msgs []map[string]any) error {
	open := map[string]bool{} // the previous assistant message's tool_use ids
	for i, m := range msgs {
		role, _ := m["role"].(string)
		answered := map[string]bool{}
		for _, b := range blocksOf(m["content"]) {
			switch b["type"] {
			case "text":
				if t, _ := b["text"].(string); strings.TrimSpace(t) == "" {
					return fmt.Errorf("messages.%d: text content blocks must contain non-whitespace text", i)
				}
			case "tool_result":
				id, _ := b["tool_use_id"].(string)
				if role != "user" || !open[id] {
					return fmt.Errorf("messages.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", i, id)
				}
				answered[id] = true
			}
		}
		for id := range open {
			if !answered[id] {
				return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i-1, id)
			}
		}
		open = map[string]bool{}
		if role == "assistant" {
			for _, b := range blocksOf(m["content"]) {
				if b["type"] == "tool_use" {
					id, _ := b["id"].(string)
					open[id] = true
				}
			}
		}
	}
	for id := range open {
		return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", len(msgs)-1, id)
	}
	return nil
}

func openAIConversationError(msgs []map[string]any) error {
	open := map[string]bool{}
	for i, m := range msgs {
		role, _ := m["role"].(string)
		if role == "tool" {
			id, _ := m["tool_call_id"].(string)
			if !open[id] {
				return fmt.Errorf("messages.[%d].role: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'", i)
			}
			delete(open, id)
			continue
		}
		if len(open) > 0 {
			return fmt.Errorf("messages.[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i)
		}
		if role == "assistant" {
			calls, _ := m["tool_calls"].([]any)
			for _, c := range calls {
				if cm, ok := c.(map[string]any); ok {
					id, _ := cm["id"].(string)
					open[id] = true
				}
			}
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("messages: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'")
	}
	return nil
}
