package sdk

import (
	"context"
	"encoding/json"
	"fmt"
)

// ToolHandler runs a client-side tool. input is the model's tool_use input
// (a JSON object). The result becomes the tool_result content: a string, a
// Block or []Block as is; json.RawMessage and []byte as text; any other value
// JSON-encoded as text. A non-nil error is sent as an is_error result whose
// text is err.Error() — the model sees it and the turn goes on.
//
// The context carries the Session (SessionFromContext), so a handler can make
// RPC calls such as ExecRemoteSandbox.
type ToolHandler func(ctx context.Context, input json.RawMessage) (any, error)

// Tool is a client-side tool: its declaration plus the handler that runs it.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the input object (a map, a struct or
	// a json.RawMessage). nil declares {"type":"object","properties":{}}.
	InputSchema any
	Handler     ToolHandler
}

// Spec returns the tool's wire declaration.
func (t Tool) Spec() ToolSpec {
	return ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
}

// ToolSpec is a tool declaration without a handler: what the server and the
// provider see. Auto-mode sandbox tools are declared with ToolSpecs only.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	InputSchema any    `json:"input_schema"`
}

// MarshalJSON defaults a nil schema to an empty object schema, which every
// provider accepts.
func (s ToolSpec) MarshalJSON() ([]byte, error) {
	type plain ToolSpec
	p := plain(s)
	if p.InputSchema == nil {
		p.InputSchema = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return json.Marshal(p)
}

// SubagentToolSpec declares a remote (server-launched) launch_subagent tool,
// sent in the session-open subagent_tools list. Build one with
// tools.RemoteSubagents.
type SubagentToolSpec struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	InputSchema any               `json:"input_schema,omitempty"`
	Image       string            `json:"image"`
	Subagents   []SubagentCommand `json:"subagents"`
}

// SubagentCommand is one configured CLI harness of a SubagentToolSpec.
type SubagentCommand struct {
	Harness         string `json:"harness"`
	CommandTemplate string `json:"command_template"`
	PromptVia       string `json:"prompt_via"`
	TimeoutSecs     int    `json:"timeout_secs,omitempty"`
}

// toContent converts a handler's return value into tool_result content.
func toContent(v any) ([]Block, error) {
	switch c := v.(type) {
	case nil:
		return nil, nil
	case string:
		if c == "" {
			return nil, nil
		}
		return []Block{Text{Text: c}}, nil
	case []Block:
		return c, nil
	case Block:
		return []Block{c}, nil
	case json.RawMessage:
		return toContent(string(c))
	case []byte:
		return toContent(string(c))
	default:
		b, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode tool result %T: %w", v, err)
		}
		return toContent(string(b))
	}
}

type sessionCtxKey struct{}

// ContextWithSession returns ctx carrying s. Send does this for every tool
// handler; call it yourself to use a builtin tool's methods outside a turn.
func ContextWithSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionCtxKey{}, s)
}

// SessionFromContext returns the Session running the current tool call, or
// nil outside one.
func SessionFromContext(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionCtxKey{}).(*Session)
	return s
}
