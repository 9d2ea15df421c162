package compaction

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Message is one stored conversation message: its counter value (seq), its
// idempotency key (which starts with the turn id) and its canonical content.
type Message struct {
	Seq     int64
	Idem    string
	Role    string
	Content json.RawMessage
}

// TurnID is the turn that stored m (its key's first segment).
func (m Message) TurnID() string {
	id, _, _ := strings.Cut(m.Idem, "/")
	return id
}

// State is a session's compaction as stored: messages up to ThroughSeq are
// replaced by Summary; tool results in messages up to ClearedSeq are
// cleared. Both only move forward.
type State struct {
	ThroughSeq int64
	ClearedSeq int64
	Summary    string
	// SummaryID is the compaction that wrote Summary.
	SummaryID string
	// BytesPerToken is the session's calibrated estimate (0 = none yet).
	BytesPerToken float64
}

// SummaryPrefix opens the summary in the view, so the model can tell it
// from what the user wrote.
const SummaryPrefix = "[Summary of the earlier conversation, compacted to fit the context window]\n"

// clearedMarker replaces a cleared tool result's content.
func clearedMarker(n int) string {
	return fmt.Sprintf("[tool result cleared to save context: %d bytes]", n)
}

// TurnStart reports whether m opens a turn: a user message that answers no
// tool_use. A view is only ever cut before such a message, so a tool_use
// and its tool_result are never separated.
func TurnStart(m Message) bool {
	return m.Role == "user" && !hasBlock(m.Content, "tool_result")
}

// KeepFrom is the index in msgs of the first message of the last keep
// turns (0 when there are fewer).
func KeepFrom(msgs []Message, keep int) int {
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if TurnStart(msgs[i]) {
			n++
			if n >= keep {
				return i
			}
		}
	}
	return 0
}

// KeepWithin is where the verbatim tail of a summarized view starts: the
// first turn start at or after from (never after current, the current
// turn's start) whose tail, rendered without a summary and with tool
// results up to clearedSeq cleared, is estimated within limit tokens.
func KeepWithin(msgs []Message, from, current int, clearedSeq int64, est Estimator, limit int) int {
	st := State{ClearedSeq: clearedSeq}
	for k := from; k < current; k++ {
		if k > from && !TurnStart(msgs[k]) {
			continue
		}
		if est.Tokens(len(Render(msgs[k:], st))) <= limit {
			return k
		}
	}
	return current
}

// ToolResultIDs are the tool_use ids of the tool results in msgs that are
// not cleared yet (content larger than a marker).
func ToolResultIDs(msgs []Message) []string {
	var ids []string
	for _, m := range msgs {
		blocks, ok := decodeBlocks(m.Content)
		if !ok {
			continue
		}
		for _, b := range blocks {
			if b["type"] == "tool_result" && !isCleared(b["content"]) {
				id, _ := b["tool_use_id"].(string)
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Render is the view of msgs (the live messages after st.ThroughSeq, in
// order) as a JSON array of canonical messages: the summary merged into the
// first message, tool results up to st.ClearedSeq cleared.
func Render(msgs []Message, st State) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			buf.WriteByte(',')
		}
		content := m.Content
		if m.Seq <= st.ClearedSeq {
			content = clearContent(content)
		}
		if i == 0 && st.Summary != "" {
			content = withSummary(content, st.Summary)
		}
		role, _ := json.Marshal(m.Role)
		buf.WriteString(`{"role":`)
		buf.Write(role)
		buf.WriteString(`,"content":`)
		buf.Write(bytes.TrimSpace(content))
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

// withSummary puts the summary before a turn's opening content.
func withSummary(content json.RawMessage, summary string) json.RawMessage {
	blocks := []any{map[string]any{"type": "text", "text": SummaryPrefix + summary}}
	var s string
	if json.Unmarshal(content, &s) == nil {
		blocks = append(blocks, map[string]any{"type": "text", "text": s})
	} else if arr, ok := decodeRaw(content); ok {
		for _, b := range arr {
			blocks = append(blocks, b)
		}
	}
	out, _ := json.Marshal(blocks)
	return out
}

// clearContent replaces every tool result's content with a marker.
func clearContent(content json.RawMessage) json.RawMessage {
	if !bytes.Contains(content, []byte(`"tool_result"`)) {
		return content
	}
	blocks, ok := decodeBlocks(content)
	if !ok {
		return content
	}
	changed := false
	for _, b := range blocks {
		if b["type"] != "tool_result" || isCleared(b["content"]) {
			continue
		}
		raw, _ := json.Marshal(b["content"])
		b["content"] = clearedMarker(len(raw))
		changed = true
	}
	if !changed {
		return content
	}
	out, _ := json.Marshal(blocks)
	return out
}

func isCleared(content any) bool {
	s, ok := content.(string)
	return ok && strings.HasPrefix(s, "[tool result cleared to save context:")
}

func hasBlock(content json.RawMessage, typ string) bool {
	if !bytes.Contains(content, []byte(`"`+typ+`"`)) {
		return false
	}
	blocks, ok := decodeBlocks(content)
	if !ok {
		return false
	}
	for _, b := range blocks {
		if b["type"] == typ {
			return true
		}
	}
	return false
}

func decodeBlocks(content json.RawMessage) ([]map[string]any, bool) {
	c := bytes.TrimSpace(content)
	if len(c) == 0 || c[0] != '[' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.UseNumber()
	var blocks []map[string]any
	if dec.Decode(&blocks) != nil {
		return nil, false
	}
	return blocks, true
}

func decodeRaw(content json.RawMessage) ([]json.RawMessage, bool) {
	var arr []json.RawMessage
	if json.Unmarshal(content, &arr) != nil {
		return nil, false
	}
	return arr, true
}

// Transcript renders messages as plain text for the summarizer, each block
// cut to perBlock bytes and the whole to at most maxBytes (the oldest part
// goes first when it must), after the previous summary.
func Transcript(prev string, msgs []Message, perBlock, maxBytes int) string {
	cut := func(s string) string {
		if len(s) <= perBlock {
			return s
		}
		return s[:perBlock] + fmt.Sprintf(" […%d bytes omitted]", len(s)-perBlock)
	}
	var lines []string
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			lines = append(lines, m.Role+": "+cut(s))
			continue
		}
		blocks, _ := decodeBlocks(m.Content)
		for _, b := range blocks {
			switch b["type"] {
			case "text":
				t, _ := b["text"].(string)
				lines = append(lines, m.Role+": "+cut(t))
			case "tool_use":
				in, _ := json.Marshal(b["input"])
				name, _ := b["name"].(string)
				lines = append(lines, fmt.Sprintf("%s called tool %s with %s", m.Role, name, cut(string(in))))
			case "tool_result":
				var t string
				if s, ok := b["content"].(string); ok {
					t = s
				} else {
					raw, _ := json.Marshal(b["content"])
					t = string(raw)
				}
				lines = append(lines, "tool result: "+cut(t))
			}
		}
	}
	body := strings.Join(lines, "\n")
	if len(body) > maxBytes {
		body = "[…earlier part omitted]\n" + body[len(body)-maxBytes:]
	}
	if prev != "" {
		body = "Summary so far:\n" + prev + "\n\nWhat followed:\n" + body
	}
	return body
}

// SummaryInstruction asks the summarizer for the summary.
const SummaryInstruction = "You are compacting a conversation between a user and an AI assistant so it fits the assistant's context window. " +
	"Write a concise summary of the conversation below that keeps every fact, decision, open task, name, number and file path the assistant needs to continue. " +
	"Answer with the summary only.\n\n"
