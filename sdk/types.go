package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bae-go/bae-go/events"
)

// Roles of a conversation turn.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Dispatch says who executes a tool_use block. Only DispatchClient blocks
// are this harness's to run; the others were already answered server-side.
type Dispatch = events.Dispatch

// Dispatch values sent by the server.
const (
	DispatchClient   = events.DispatchClient
	DispatchSandbox  = events.DispatchSandbox
	DispatchMCP      = events.DispatchMCP
	DispatchSubagent = events.DispatchSubagent
)

// Block is one content block: Text, ToolUse, ToolResult, or RawBlock for any
// other type (images, …), which is kept verbatim.
type Block interface {
	// BlockType is the wire "type" discriminator.
	BlockType() string
	isBlock()
}

// Text is a {"type":"text"} block.
type Text struct {
	Text string `json:"text"`
}

// ToolUse is a {"type":"tool_use"} block: the model asking for a tool.
type ToolUse struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// Dispatch is set by current servers; empty from servers that predate
	// it, in which case the block is ours iff Name is a registered tool.
	Dispatch Dispatch `json:"dispatch,omitempty"`
}

// ToolResult is a {"type":"tool_result"} block answering a ToolUse.
type ToolResult struct {
	ToolUseID string
	// Content is the result body. On the wire a result holding no blocks is
	// sent as the empty string, since an empty text block is invalid.
	Content []Block
	IsError bool
}

// RawBlock is a block of a type this package does not model, kept verbatim.
type RawBlock struct {
	Type string
	JSON json.RawMessage // the whole block, including "type"
}

func (Text) BlockType() string       { return "text" }
func (ToolUse) BlockType() string    { return "tool_use" }
func (ToolResult) BlockType() string { return "tool_result" }
func (b RawBlock) BlockType() string { return b.Type }
func (Text) isBlock()                {}
func (ToolUse) isBlock()             {}
func (ToolResult) isBlock()          {}
func (RawBlock) isBlock()            {}

// MarshalJSON adds the type discriminator.
func (b Text) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", b.Text})
}

// MarshalJSON adds the type discriminator and defaults Input to {}.
func (b ToolUse) MarshalJSON() ([]byte, error) {
	input := b.Input
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	type plain ToolUse
	return json.Marshal(struct {
		Type string `json:"type"`
		plain
	}{"tool_use", plain{ID: b.ID, Name: b.Name, Input: input, Dispatch: b.Dispatch}})
}

// MarshalJSON adds the type discriminator.
func (b ToolResult) MarshalJSON() ([]byte, error) {
	var content any = ""
	if len(b.Content) > 0 {
		content = b.Content
	}
	return json.Marshal(struct {
		Type      string `json:"type"`
		ToolUseID string `json:"tool_use_id"`
		Content   any    `json:"content"`
		IsError   bool   `json:"is_error,omitempty"`
	}{"tool_result", b.ToolUseID, content, b.IsError})
}

// UnmarshalJSON accepts string or block-array content.
func (b *ToolResult) UnmarshalJSON(data []byte) error {
	var w struct {
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	content, err := decodeContent(w.Content)
	if err != nil {
		return err
	}
	*b = ToolResult{ToolUseID: w.ToolUseID, Content: content, IsError: w.IsError}
	return nil
}

// MarshalJSON emits the block verbatim.
func (b RawBlock) MarshalJSON() ([]byte, error) {
	if len(b.JSON) == 0 {
		return json.Marshal(map[string]string{"type": b.Type})
	}
	return b.JSON, nil
}

// decodeBlock decodes one block by its type.
func decodeBlock(raw json.RawMessage) (Block, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("content block: %w", err)
	}
	switch head.Type {
	case "text":
		var b Text
		err := json.Unmarshal(raw, &b)
		return b, err
	case "tool_use":
		var b ToolUse
		type plain ToolUse // avoid recursing into a custom decoder
		err := json.Unmarshal(raw, (*plain)(&b))
		return b, err
	case "tool_result":
		var b ToolResult
		err := json.Unmarshal(raw, &b)
		return b, err
	default:
		return RawBlock{Type: head.Type, JSON: append(json.RawMessage(nil), raw...)}, nil
	}
}

// decodeContent accepts the two wire forms of content: a string (one text
// block) or an array of blocks. null and absent decode to no blocks.
func decodeContent(raw json.RawMessage) ([]Block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, nil
		}
		return []Block{Text{Text: s}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("content must be a string or an array of blocks: %w", err)
	}
	blocks := make([]Block, 0, len(items))
	for _, it := range items {
		b, err := decodeBlock(it)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// Message is one conversation turn.
type Message struct {
	Role    string
	Content []Block
}

// MarshalJSON always emits content as an array of blocks.
func (m Message) MarshalJSON() ([]byte, error) {
	content := m.Content
	if content == nil {
		content = []Block{}
	}
	return json.Marshal(struct {
		Role    string  `json:"role"`
		Content []Block `json:"content"`
	}{m.Role, content})
}

// UnmarshalJSON accepts string or block-array content.
func (m *Message) UnmarshalJSON(data []byte) error {
	var w struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	content, err := decodeContent(w.Content)
	if err != nil {
		return err
	}
	*m = Message{Role: w.Role, Content: content}
	return nil
}

// Text concatenates the message's text blocks.
func (m Message) Text() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if t, ok := b.(Text); ok {
			sb.WriteString(t.Text)
		}
	}
	return sb.String()
}

// ToolUses returns the message's tool_use blocks, in order.
func (m Message) ToolUses() []ToolUse {
	var out []ToolUse
	for _, b := range m.Content {
		if tu, ok := b.(ToolUse); ok {
			out = append(out, tu)
		}
	}
	return out
}

// userMessage normalizes Send's content argument.
func userMessage(content any) (Message, error) {
	switch c := content.(type) {
	case string:
		if c == "" {
			return Message{}, errors.New("bae: empty message")
		}
		return Message{Role: RoleUser, Content: []Block{Text{Text: c}}}, nil
	case []Block:
		if len(c) == 0 {
			return Message{}, errors.New("bae: empty message")
		}
		return Message{Role: RoleUser, Content: c}, nil
	case Block:
		return Message{Role: RoleUser, Content: []Block{c}}, nil
	case Message:
		if c.Role == "" {
			c.Role = RoleUser
		}
		return c, nil
	case *Message:
		if c == nil {
			return Message{}, errors.New("bae: nil message")
		}
		return userMessage(*c)
	default:
		return Message{}, fmt.Errorf("bae: unsupported message content %T (want string, []Block, Block or Message)", content)
	}
}

// wireMessage strips the receive-only dispatch tag from tool_use blocks:
// the server never expects it back.
func wireMessage(m Message) Message {
	out := Message{Role: m.Role, Content: make([]Block, len(m.Content))}
	for i, b := range m.Content {
		if tu, ok := b.(ToolUse); ok {
			tu.Dispatch = ""
			b = tu
		}
		out.Content[i] = b
	}
	return out
}

// Profile is the sanitized profile returned at open/join.
type Profile struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	AllowedTools []string        `json:"allowed_tools"`
	MCPServers   []string        `json:"mcp_servers"`
	Provider     ProfileProvider `json:"provider"`
}

// ProfileProvider names the profile's primary provider.
type ProfileProvider struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}
