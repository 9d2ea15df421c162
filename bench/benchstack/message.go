package benchstack

import (
	"encoding/json"
	"strings"
)

// Block is one content block of a message as the event log stores it.
type Block = map[string]any

// Blocks decodes a message's content: a string is one text block.
func Blocks(content json.RawMessage) []Block {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []Block{{"type": "text", "text": s}}
	}
	var arr []Block
	_ = json.Unmarshal(content, &arr)
	return arr
}

// ContentOf is a message's content field, nil when it has none.
func ContentOf(msg json.RawMessage) json.RawMessage {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(msg, &m)
	return m.Content
}

// MessageText joins the text blocks of a message.
func MessageText(msg json.RawMessage) string {
	var parts []string
	for _, b := range Blocks(ContentOf(msg)) {
		if b["type"] == "text" {
			if t, ok := b["text"].(string); ok {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}
