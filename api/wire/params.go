package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Bounds on a driver's message. Anything beyond them is refused before it
// is stored, so no driver can put a message into a shared session that a
// provider would reject on every later turn.
const (
	// MaxMessageBytes bounds the encoded message.
	MaxMessageBytes = 2 << 20
	// MaxContentBlocks bounds the blocks of a message, nested ones included.
	MaxContentBlocks = 1000
	// MaxNestingDepth bounds JSON nesting anywhere in the params.
	MaxNestingDepth = 32
)

// Content block types a driver may send. tool_use blocks are written by the
// assistant only; a user message carries text and the results of tool uses.
const (
	BlockText       = "text"
	BlockToolResult = "tool_result"
	BlockToolUse    = "tool_use"
)

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolResultBlock struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   any    `json:"content,omitempty"` // string or []textBlock
	IsError   *bool  `json:"is_error,omitempty"`
}

func invalid(format string, args ...any) *Error {
	return Errorf(-32602, "Invalid params: "+format, args...)
}

// ParseSendMessage validates session.sendMessage params and returns the
// message to store, {"role":"user","content":…}. The role is "user"
// (absent means "user"); content is a non-blank string or an array of text
// and tool_result blocks, each with its required fields and no others.
// Blocks are re-encoded from what was checked, so what is stored is exactly
// what was validated. Pure so it can be fuzzed.
func ParseSendMessage(params json.RawMessage) (json.RawMessage, *Error) {
	if Depth(params) > MaxNestingDepth {
		return nil, invalid("message nests deeper than %d levels", MaxNestingDepth)
	}
	var p struct {
		Message *json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Message == nil || string(*p.Message) == "null" {
		return nil, invalid(`missing "message"`)
	}
	if len(*p.Message) > MaxMessageBytes {
		return nil, invalid("message exceeds %d bytes", MaxMessageBytes)
	}
	var msg struct {
		Role    *json.RawMessage `json:"role"`
		Content *json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(*p.Message, &msg); err != nil {
		return nil, invalid("message must be an object with string role and content")
	}
	if msg.Role != nil && string(*msg.Role) != "null" {
		var role string
		if json.Unmarshal(*msg.Role, &role) != nil || role != "user" {
			return nil, invalid(`message.role must be "user"`)
		}
	}
	if msg.Content == nil {
		return nil, invalid(`message.content must be a string or an array of content blocks`)
	}
	content, bad := parseContent(*msg.Content)
	if bad != nil {
		return nil, bad
	}
	stored, err := json.Marshal(map[string]any{"role": "user", "content": content})
	if err != nil {
		// Everything in content was decoded above, so it re-encodes.
		return nil, invalid("%v", err)
	}
	return stored, nil
}

func parseContent(raw json.RawMessage) (any, *Error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil, invalid("message.content must not be blank")
		}
		return s, nil
	}
	var blocks []json.RawMessage
	if json.Unmarshal(raw, &blocks) != nil || blocks == nil {
		return nil, invalid(`message.content must be a string or an array of content blocks`)
	}
	if len(blocks) == 0 {
		return nil, invalid("message.content must not be an empty array")
	}
	count := 0
	out := make([]any, 0, len(blocks))
	for i, b := range blocks {
		where := fmt.Sprintf("message.content[%d]", i)
		typ, bad := blockType(b, where)
		if bad != nil {
			return nil, bad
		}
		var v any
		n := 1
		switch typ {
		case BlockText:
			v, bad = parseText(b, where)
		case BlockToolResult:
			v, n, bad = parseToolResult(b, where)
		case BlockToolUse:
			return nil, invalid("%s: tool_use blocks come from the assistant; a user message holds text and tool_result blocks", where)
		default:
			return nil, invalid(`%s: unknown block type %q (expected "text" or "tool_result")`, where, clip(typ))
		}
		if bad != nil {
			return nil, bad
		}
		if count += n; count > MaxContentBlocks {
			return nil, invalid("message.content holds more than %d blocks", MaxContentBlocks)
		}
		out = append(out, v)
	}
	return out, nil
}

func blockType(raw json.RawMessage, where string) (string, *Error) {
	var b struct {
		Type *string `json:"type"`
	}
	if !IsObject(raw) {
		return "", invalid("%s must be a content block object", where)
	}
	if json.Unmarshal(raw, &b) != nil || b.Type == nil {
		return "", invalid(`%s requires a string "type"`, where)
	}
	return *b.Type, nil
}

// strict decodes raw into v, refusing fields v does not name: providers
// refuse unknown block fields, so storing one would fail every later turn.
func strict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func parseText(raw json.RawMessage, where string) (textBlock, *Error) {
	var b struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := strict(raw, &b); err != nil {
		return textBlock{}, invalid("%s: a text block is {\"type\",\"text\"} with a string text (%s)", where, clip(err.Error()))
	}
	if b.Text == nil || strings.TrimSpace(*b.Text) == "" {
		return textBlock{}, invalid("%s.text must be a non-blank string", where)
	}
	return textBlock{Type: BlockText, Text: *b.Text}, nil
}

// parseToolResult checks a tool_result block; its content is a string or an
// array of text blocks. n counts the block and its nested blocks.
func parseToolResult(raw json.RawMessage, where string) (toolResultBlock, int, *Error) {
	var b struct {
		Type      string           `json:"type"`
		ToolUseID *string          `json:"tool_use_id"`
		Content   *json.RawMessage `json:"content"`
		IsError   *bool            `json:"is_error"`
	}
	if err := strict(raw, &b); err != nil {
		return toolResultBlock{}, 0, invalid("%s: a tool_result block is {\"type\",\"tool_use_id\",\"content\",\"is_error\"} (%s)", where, clip(err.Error()))
	}
	if b.ToolUseID == nil || strings.TrimSpace(*b.ToolUseID) == "" {
		return toolResultBlock{}, 0, invalid("%s.tool_use_id must be a non-empty string", where)
	}
	out := toolResultBlock{Type: BlockToolResult, ToolUseID: *b.ToolUseID, IsError: b.IsError}
	n := 1
	if b.Content != nil && string(*b.Content) != "null" {
		var s string
		var inner []json.RawMessage
		switch {
		case json.Unmarshal(*b.Content, &s) == nil:
			out.Content = s
		case json.Unmarshal(*b.Content, &inner) == nil && inner != nil:
			texts := make([]textBlock, 0, len(inner))
			for j, ib := range inner {
				iw := fmt.Sprintf("%s.content[%d]", where, j)
				typ, bad := blockType(ib, iw)
				if bad != nil {
					return out, 0, bad
				}
				if typ != BlockText {
					return out, 0, invalid("%s: a tool_result holds text blocks only, not %q", iw, clip(typ))
				}
				tb, bad := parseText(ib, iw)
				if bad != nil {
					return out, 0, bad
				}
				texts = append(texts, tb)
			}
			out.Content = texts
			n += len(texts)
		default:
			return out, 0, invalid("%s.content must be a string or an array of text blocks", where)
		}
	}
	return out, n, nil
}

// clip keeps client-controlled text in error messages short.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Depth is the deepest nesting of arrays and objects in raw, which must be
// valid JSON (the envelope checks ensure it). It only counts brackets
// outside strings, so it is linear and never recurses.
func Depth(raw []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// IsJSONString reports whether r is a JSON string.
func IsJSONString(r json.RawMessage) bool { var s string; return json.Unmarshal(r, &s) == nil }

// IsJSONArray reports whether r is a JSON array.
func IsJSONArray(r json.RawMessage) bool {
	var a []json.RawMessage
	return json.Unmarshal(r, &a) == nil && a != nil
}
