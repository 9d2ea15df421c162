package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/tooldecl"
)

// mcpTool is a tool discovered on an MCP server at session open.
type mcpTool struct {
	Server      string          `json:"server"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// toolset is what one turn may use: the acting client's own declarations
// plus the session-wide MCP tools. Other drivers' tools are never included.
type toolset struct {
	advertised []tooldecl.Decl
	client     map[string]bool
	sandbox    map[string]bool
	subagent   map[string]bool
	mcpRoute   map[string]string
}

func defs(raw json.RawMessage) ([]tooldecl.Decl, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var list []tooldecl.Decl
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode tool declarations: %w", err)
	}
	for i := range list {
		if len(list[i].InputSchema) == 0 || string(list[i].InputSchema) == "null" {
			list[i].InputSchema = json.RawMessage(`{}`)
		}
	}
	return list, nil
}

func (a *Activities) toolsFor(ctx context.Context, sessionID, clientKeyID string) (toolset, error) {
	var ts toolset
	err := a.Store.Tx(ctx, func(tx *store.Tx) error {
		in, err := tx.AttemptInputs(ctx, sessionID, clientKeyID, "")
		if err != nil {
			return err
		}
		ts, err = toolsFrom(in)
		return err
	})
	return ts, err
}

// toolsFrom builds the acting client's toolset from what an attempt read.
func toolsFrom(in store.AttemptInputs) (toolset, error) {
	ts := toolset{client: map[string]bool{}, sandbox: map[string]bool{}, subagent: map[string]bool{}, mcpRoute: map[string]string{}}
	decl := in.Decl
	for _, part := range []struct {
		raw  json.RawMessage
		mark map[string]bool
	}{{decl.Tools, ts.client}, {decl.SandboxTools, ts.sandbox}, {decl.SubagentTools, ts.subagent}} {
		list, err := defs(part.raw)
		if err != nil {
			return ts, err
		}
		for _, d := range list {
			part.mark[d.Name] = true
			ts.advertised = append(ts.advertised, d)
		}
	}
	var mcp []mcpTool
	if len(in.MCPTools) > 0 {
		if err := json.Unmarshal(in.MCPTools, &mcp); err != nil {
			return ts, fmt.Errorf("decode mcp tools: %w", err)
		}
	}
	for _, t := range mcp {
		if _, dup := ts.mcpRoute[t.Name]; dup {
			continue // the first server to offer a name owns it
		}
		ts.mcpRoute[t.Name] = t.Server
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		ts.advertised = append(ts.advertised, tooldecl.Decl{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	// The status tool is visible only while there is something to report.
	if in.TrackedSubagents {
		ts.subagent[tooldecl.StatusTool] = true
		ts.advertised = append(ts.advertised, tooldecl.StatusDecl())
	}
	return ts, nil
}

// classify decides who executes a tool_use block.
func (ts toolset) classify(name string) (dispatch events.Dispatch, server string) {
	switch {
	case ts.client[name]:
		return events.DispatchClient, ""
	case ts.sandbox[name]:
		return events.DispatchSandbox, ""
	case ts.subagent[name] || name == tooldecl.StatusTool:
		return events.DispatchSubagent, ""
	default:
		return events.DispatchMCP, ts.mcpRoute[name]
	}
}

func (ts toolset) json() json.RawMessage {
	if len(ts.advertised) == 0 {
		return json.RawMessage(`[]`)
	}
	b, _ := json.Marshal(ts.advertised)
	return b
}
