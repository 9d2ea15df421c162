package wire

import "encoding/json"

// ParseSendMessage validates session.sendMessage params and returns the
// message to store, {"role","content"}: role defaults to "user"; content is
// a string or an array, passed through as sent (blocks are not inspected
// here, as the reference passes them through too). Pure so it can be fuzzed.
func ParseSendMessage(params json.RawMessage) (json.RawMessage, *Error) {
	var p struct {
		Message *json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Message == nil || string(*p.Message) == "null" {
		return nil, Errorf(-32602, `Invalid params: missing "message"`)
	}
	var msg struct {
		Role    *string          `json:"role"`
		Content *json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(*p.Message, &msg); err != nil {
		return nil, Errorf(-32602, "Invalid params: message must be an object with string role and content")
	}
	if msg.Content == nil || !(IsJSONString(*msg.Content) || IsJSONArray(*msg.Content)) {
		return nil, Errorf(-32602, `Invalid params: message.content must be a string or an array of content blocks`)
	}
	role := "user"
	if msg.Role != nil {
		role = *msg.Role
	}
	stored, err := json.Marshal(map[string]any{"role": role, "content": *msg.Content})
	if err != nil {
		// Content was decoded above, so it re-encodes; kept as a guard.
		return nil, Errorf(-32602, "Invalid params: %v", err)
	}
	return stored, nil
}

// IsJSONString reports whether r is a JSON string.
func IsJSONString(r json.RawMessage) bool { var s string; return json.Unmarshal(r, &s) == nil }

// IsJSONArray reports whether r is a JSON array.
func IsJSONArray(r json.RawMessage) bool {
	var a []json.RawMessage
	return json.Unmarshal(r, &a) == nil && a != nil
}
