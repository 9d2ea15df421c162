package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// internalBlockFields are baesrv routing/attribution tags persisted on
// tool_use blocks and replayed with history; the LLM must never see them (an
// unknown field can trip a provider's strict schema validation).
var internalBlockFields = [...]string{"dispatch", "caller"}

// decodeJSON parses one JSON value, keeping numbers as json.Number so they
// are re-encoded verbatim.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// marshalJSON encodes without HTML escaping, so text such as "<b>" reaches
// the provider unchanged.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// parseMessages decodes canonical messages (absent or null means none) and
// strips internal fields from their tool_use blocks.
func parseMessages(raw json.RawMessage) ([]any, error) {
	if isAbsent(raw) {
		return []any{}, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	msgs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("messages must be a JSON array, got %s", jsonKind(v))
	}
	for _, m := range msgs {
		msg, ok := m.(map[string]any)
		if !ok {
			continue
		}
		blocks, ok := msg["content"].([]any)
		if !ok {
			continue
		}
		for _, b := range blocks {
			if block, ok := b.(map[string]any); ok && block["type"] == "tool_use" {
				for _, f := range internalBlockFields {
					delete(block, f)
				}
			}
		}
	}
	return msgs, nil
}

// parseTools decodes canonical tool definitions into null-free objects with
// an input_schema (an absent one becomes {"type":"object"}, which both wire
// formats require).
func parseTools(raw json.RawMessage) ([]map[string]any, error) {
	if isAbsent(raw) {
		return nil, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("tools must be a JSON array, got %s", jsonKind(v))
	}
	tools := make([]map[string]any, 0, len(arr))
	for i, t := range arr {
		tool, ok := t.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("tool %d must be an object, got %s", i, jsonKind(t))
		}
		for k, val := range tool {
			if val == nil {
				delete(tool, k)
			}
		}
		if d, ok := tool["description"].(string); ok && d == "" {
			delete(tool, "description")
		}
		if _, ok := tool["input_schema"]; !ok {
			tool["input_schema"] = map[string]any{"type": "object"}
		}
		tools = append(tools, tool)
	}
	return tools, nil
}

func isAbsent(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	default:
		return "number"
	}
}

// stringField returns m[key] when it is a string, else "".
func stringField(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// Text is the text of canonical message content: a string as it is, or the
// text blocks of an array, newline-separated.
func Text(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		return joinedText(c)
	}
	return ""
}

// joinedText concatenates the text of every text block, newline-separated.
func joinedText(blocks []any) string {
	var parts []string
	for _, b := range blocks {
		block, ok := b.(map[string]any)
		if !ok || block["type"] != "text" {
			continue
		}
		if t, ok := block["text"].(string); ok {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}
