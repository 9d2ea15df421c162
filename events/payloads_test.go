package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
)

// Each payload renders the catalog's shape (BAE's message-type reference)
// and names its own type; every emitted type has a payload.
func TestPayloadShapes(t *testing.T) {
	srv := "fs"
	id := "sbx_1"
	code := int64(3)
	reason := "nonzero_exit"
	status := 429
	two := 2
	cases := []struct {
		p    events.Payload
		typ  events.Type
		want string
	}{
		{events.ClientMessage{Role: "user", Content: json.RawMessage(`"hi"`)}, events.ClientMessageSend, `{"role":"user","content":"hi"}`},
		{events.ServerMessage{Content: json.RawMessage(`[]`)}, events.ServerMessageSend, `{"role":"assistant","content":[]}`},
		{events.ProviderRequestPayload{Attempt: 1, Kind: "fallback", Provider: "openai", BaseURL: "u", Model: "m", MaxTokens: 5, Messages: []int{}, Tools: []int{}},
			events.ProviderRequest, `{"attempt":1,"kind":"fallback","provider":"openai","base_url":"u","model":"m","max_tokens":5,"messages":[],"tools":[]}`},
		{events.ProviderResponsePayload{Attempt: 0, Kind: "primary", Status: &status, Error: "rate limit"}, events.ProviderResponse,
			`{"attempt":0,"kind":"primary","provider":null,"ok":false,"status":429,"error":"rate limit","body":null}`},
		{events.ToolCallPayload{ID: "tu", Name: "ls", Input: map[string]any{}, Dispatch: events.DispatchMCP, ServerName: &srv}, events.ToolCall,
			`{"id":"tu","name":"ls","input":{},"dispatch":"mcp","server_name":"fs"}`},
		{events.ToolResultPayload{ToolUseID: "tu", Dispatch: events.DispatchClient, Content: "x"}, events.ToolResult,
			`{"tool_use_id":"tu","dispatch":"client","server_name":null,"is_error":false,"content":"x"}`},
		{events.ToolResultPayload{ToolUseID: "tu", Dispatch: events.DispatchSandbox, IsError: true, Content: []int{}}, events.ToolResult,
			`{"tool_use_id":"tu","dispatch":"sandbox","is_error":true,"content":[]}`},
		{events.MCPRequestPayload{Method: "tools/call", ServerName: &srv, Tool: "ls", Input: map[string]any{}}, events.MCPRequest,
			`{"method":"tools/call","server_name":"fs","tool":"ls","input":{}}`},
		{events.MCPResponsePayload{ServerName: &srv, Error: "gone"}, events.MCPResponse, `{"server_name":"fs","ok":false,"error":"gone"}`},
		{events.SandboxRequestPayload{Tool: "sh", Input: map[string]any{}, Command: nil}, events.SandboxRequest, `{"tool":"sh","input":{},"command":null}`},
		{events.SandboxResponsePayload{Error: "no sandbox"}, events.SandboxResponse, `{"sandbox_id":null,"ok":false,"error":"no sandbox"}`},
		{events.Declarations{Tools: []string{"a"}, SandboxTools: []string{}, SubagentTools: []string{}}, events.SessionOpen,
			`{"client_version":null,"tools":["a"],"sandbox_tools":[],"subagent_tools":[]}`},
		{events.Declarations{Join: true, Tools: []string{}, SandboxTools: []string{}, SubagentTools: []string{}}, events.SessionJoin,
			`{"client_version":null,"tools":[],"sandbox_tools":[],"subagent_tools":[]}`},
		{events.DriverRegister{}, events.SessionDriverRegister, `{}`},
		{events.SessionClosePayload{Reason: events.CloseClientClose}, events.SessionClose, `{"reason":"client_close"}`},
		{events.SessionErrorPayload{Reason: events.ReasonAllProvidersFailed, Attempts: &two}, events.SessionError, `{"reason":"all_providers_failed","attempts":2}`},
		{events.SandboxAvailablePayload{Images: []events.SandboxImage{{Name: "i", Status: "ready"}}}, events.SessionSandboxAvailable,
			`{"images":[{"name":"i","status":"ready"}]}`},
		{events.RemoteSandbox{Kind: events.SessionSandboxStart, Image: "i"}, events.SessionSandboxStart, `{"image":"i","dispatch":"remote"}`},
		{events.RemoteSandbox{Kind: events.SessionSandboxRunning, Image: "i", SandboxID: id}, events.SessionSandboxRunning, `{"image":"i","sandbox_id":"sbx_1","dispatch":"remote"}`},
		{events.RemoteSandbox{Kind: events.SessionSandboxStop, Image: "i", SandboxID: id, Reason: "r"}, events.SessionSandboxStop, `{"image":"i","sandbox_id":"sbx_1","reason":"r","dispatch":"remote"}`},
		{events.RemoteSandbox{Kind: events.SessionSandboxStopped, Image: "i", SandboxID: id, Reason: "r"}, events.SessionSandboxStopped, `{"image":"i","sandbox_id":"sbx_1","reason":"r","dispatch":"remote"}`},
		{events.RemoteSandbox{Kind: events.SessionSandboxError, Image: "i", Phase: "start", Detail: "d"}, events.SessionSandboxError, `{"image":"i","phase":"start","detail":"d","dispatch":"remote"}`},
		{events.LocalSandbox{Kind: events.SessionSandboxRunning, Unsandboxed: true}, events.SessionSandboxRunning,
			`{"dispatch":"local","image":null,"unsandboxed":true,"container_id":null,"detail":null}`},
		{events.Subagent{Kind: events.SubagentStart, Placement: events.PlacementRemote, SubagentID: "s", Harness: "h", Model: "m"}, events.SubagentStart,
			`{"dispatch":"remote","subagent_id":"s","harness":"h","model":"m","detail":null}`},
		{events.Subagent{Kind: events.SubagentRunning, Placement: events.PlacementLocal, SubagentID: "s", Harness: "h", Model: "m"}, events.SubagentRunning,
			`{"dispatch":"local","subagent_id":"s","harness":"h","model":"m","detail":null}`},
		{events.Subagent{Kind: events.SubagentCompleted, Placement: events.PlacementRemote, SubagentID: "s", Harness: "h", Model: "m", ExitCode: new(int64)}, events.SubagentCompleted,
			`{"dispatch":"remote","subagent_id":"s","harness":"h","model":"m","detail":null,"exit_code":0}`},
		{events.Subagent{Kind: events.SubagentFailed, Placement: events.PlacementRemote, SubagentID: "s", Harness: "h", Model: "m", Reason: &reason, ExitCode: &code}, events.SubagentFailed,
			`{"dispatch":"remote","subagent_id":"s","harness":"h","model":"m","detail":null,"reason":"nonzero_exit","exit_code":3}`},
		{events.Subagent{Kind: events.SubagentCancelled, Placement: events.PlacementRemote, SubagentID: "s", Harness: "h", Model: "m", Reason: &reason}, events.SubagentCancelled,
			`{"dispatch":"remote","subagent_id":"s","harness":"h","model":"m","detail":null,"reason":"nonzero_exit","exit_code":null}`},
		{events.Subagent{Kind: events.SubagentCancelled, Placement: events.PlacementLocal, SubagentID: "s", Harness: "h", Model: "m"}, events.SubagentCancelled,
			`{"dispatch":"local","subagent_id":"s","harness":"h","model":"m","detail":null,"reason":null}`},
	}
	cases = append(cases, struct {
		p    events.Payload
		typ  events.Type
		want string
	}{events.CompactionPayload{CompactionID: "c", Layer: events.LayerClearToolResults, Trigger: events.TriggerBudget, Provider: "p",
		Events: events.SeqRange{From: 1, Through: 9}, Messages: events.SeqRange{From: 1, Through: 4}, TokensBefore: 10, TokensAfter: 5, Budget: 8,
		ClearedToolResults: []string{"tu_1"}}, events.SessionCompaction,
		`{"compaction_id":"c","layer":"clear_tool_results","trigger":"budget","provider":"p","events":{"from_seq":1,"through_seq":9},"messages":{"from_seq":1,"through_seq":4},"tokens_before":10,"tokens_after":5,"budget":8,"cleared_tool_results":["tu_1"]}`})
	cases = append(cases, struct {
		p    events.Payload
		typ  events.Type
		want string
	}{events.InterruptedMessage{Content: json.RawMessage(`[{"type":"text","text":"par"}]`), Partial: true, By: "ck_1"}, events.ServerMessageInterrupted,
		`{"role":"assistant","content":[{"type":"text","text":"par"}],"partial":true,"closed_tool_use_ids":[],"by":"ck_1"}`})
	apprServer := "github"
	cases = append(cases, struct {
		p    events.Payload
		typ  events.Type
		want string
	}{events.ApprovalRequestPayload{ApprovalID: "apr_1", TurnID: "trn_1", ToolCallID: "tu_1", ToolKind: events.DispatchMCP, ToolName: "create_issue", Server: &apprServer,
		Arguments: json.RawMessage(`{"repo":"acme/prod"}`), Deciders: events.DecidersAnyDriver, Deadline: "2026-01-01T00:00:00Z", OnTimeout: events.OnTimeoutReject}, events.ApprovalRequest,
		`{"approval_id":"apr_1","turn_id":"trn_1","tool_call_id":"tu_1","tool_kind":"mcp","tool_name":"create_issue","server":"github","arguments":{"repo":"acme/prod"},"deciders":"any_driver","deadline":"2026-01-01T00:00:00Z","on_timeout":"reject"}`},
		struct {
			p    events.Payload
			typ  events.Type
			want string
		}{events.ApprovalDecisionPayload{ApprovalID: "apr_1", Decision: events.DecisionRejected, Message: "no", DecidedBy: events.DecidedBy{Kind: events.DecidedByDriver, ClientID: "key_1"}}, events.ApprovalDecision,
			`{"approval_id":"apr_1","decision":"rejected","message":"no","decided_by":{"kind":"driver","client_id":"key_1"}}`})
	covered := map[events.Type]bool{}
	for _, c := range cases {
		assert.Equal(t, c.typ, c.p.EventType())
		assert.True(t, c.typ.Known(), "%s", c.typ)
		got, err := json.Marshal(c.p)
		require.NoError(t, err)
		assert.JSONEq(t, c.want, string(got), "%s", c.typ)
		covered[c.typ] = true
	}
	for _, typ := range events.All() {
		assert.True(t, covered[typ], "no payload shape tested for %s", typ)
	}
}

func TestFamilyPayloadRefusesForeignKind(t *testing.T) {
	assert.Panics(t, func() { _ = events.RemoteSandbox{Kind: events.ToolCall}.EventType() })
	assert.Panics(t, func() { _ = events.Subagent{Kind: events.SessionOpen}.EventType() })
	assert.Panics(t, func() { _ = events.LocalSandbox{Kind: events.SessionSandboxStart}.EventType() })
}
