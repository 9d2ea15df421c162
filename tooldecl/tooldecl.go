// Package tooldecl is the one home of what a client declares about its
// tools: the declaration shapes (client and Auto-mode sandbox tools, remote
// subagent tools), and the tool name the server reserves for itself. The api
// validates declarations in these shapes, the store keeps them, and the
// activities advertise them to providers and route calls by them.
package tooldecl

import "encoding/json"

// StatusTool is the server-synthesized remote_subagent_status tool, offered
// when a client declares remote subagent tools; no client may declare it.
const StatusTool = "remote_subagent_status"

// Decl is one declared tool as providers see it.
type Decl struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Subagent is one harness a remote subagent tool can launch.
type Subagent struct {
	Harness         string `json:"harness"`
	CommandTemplate string `json:"command_template"`
	PromptVia       string `json:"prompt_via"`
	TimeoutSecs     *int64 `json:"timeout_secs,omitempty"`
}

// SubagentTool is a subagent_tools entry: a tool the model calls to launch
// one of Subagents in a container of Image.
type SubagentTool struct {
	Decl
	Image     string     `json:"image"`
	Subagents []Subagent `json:"subagents"`
}

// StatusDecl is the advertised declaration of StatusTool.
func StatusDecl() Decl {
	desc := "Check the status of subagents launched with launch_subagent. Pass a subagent_id to query one subagent, or omit it to list all tracked subagents. A subagent that has finished is reported with its captured output exactly once."
	return Decl{Name: StatusTool, Description: &desc, InputSchema: json.RawMessage(`{"type":"object","properties":{"subagent_id":{"type":"string","description":"The subagent to query. Omit to report every tracked subagent."}},"required":[],"additionalProperties":false}`)}
}
