package console

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// A held call's card shows the request, then who decided and how (the
// edited arguments, or the rejection the model read), beside its result;
// a call still waiting says so and links to the approvals page.
func TestTranscriptApprovals(t *testing.T) {
	srv := "github"
	evs := []store.Event{
		ev(1, "trn_a", events.ClientMessageSend, map[string]any{"content": "open it"}),
		ev(2, "trn_a", events.ToolCall, map[string]any{"id": "tu_1", "name": "create_issue", "input": map[string]any{"repo": "acme/prod"}, "dispatch": "mcp", "server_name": "github"}),
		ev(3, "trn_a", events.ApprovalRequest, events.ApprovalRequestPayload{ApprovalID: "apr_1", TurnID: "trn_a", ToolCallID: "tu_1", ToolKind: events.DispatchMCP,
			ToolName: "create_issue", Server: &srv, Arguments: json.RawMessage(`{"repo":"acme/prod"}`), Deciders: events.DecidersAnyDriver,
			Deadline: "2026-01-02T03:04:05Z", OnTimeout: events.OnTimeoutReject}),
		ev(4, "trn_a", events.ApprovalDecision, events.ApprovalDecisionPayload{ApprovalID: "apr_1", Decision: events.DecisionApproved,
			Arguments: json.RawMessage(`{"repo":"acme/staging"}`), DecidedBy: events.DecidedBy{Kind: events.DecidedByOperator, Operator: "console"}}),
		ev(5, "trn_a", events.ToolResult, map[string]any{"tool_use_id": "tu_1", "dispatch": "mcp", "is_error": false, "content": "opened acme/staging#42"}),
		ev(6, "trn_b", events.ClientMessageSend, map[string]any{"content": "and another"}),
		ev(7, "trn_b", events.ToolCall, map[string]any{"id": "tu_2", "name": "create_issue", "input": map[string]any{}, "dispatch": "mcp", "server_name": "github"}),
		ev(8, "trn_b", events.ApprovalRequest, events.ApprovalRequestPayload{ApprovalID: "apr_2", TurnID: "trn_b", ToolCallID: "tu_2", ToolKind: events.DispatchMCP,
			ToolName: "create_issue", Arguments: json.RawMessage(`{}`), Deciders: events.DecidersOperators, Deadline: "2026-01-02T04:00:00Z", OnTimeout: events.OnTimeoutApprove}),
	}
	items := buildTranscript(evs)
	require.Len(t, items, 2)
	first := items[0].Turn.Entries[1].Tool
	require.NotNil(t, first.Approval)
	assert.Equal(t, &approvalView{ID: "apr_1", Deciders: "any_driver", Deadline: "2026-01-02T03:04:05Z", OnTimeout: "reject",
		State: "approved", By: "operator console", Args: "{\n  \"repo\": \"acme/staging\"\n}"}, first.Approval)
	assert.Len(t, items[0].Turn.Entries, 2, "the approval events fold into their call")

	var v sessionView
	v.Items, v.Session.ID, v.Session.State = items, "ses_x", "open"
	pages, err := parsePages()
	require.NoError(t, err)
	html, err := (&Console{pages: pages}).fragment("transcript", v)
	require.NoError(t, err)
	assert.Contains(t, html, "Approved by operator console")
	assert.Contains(t, html, "with edited arguments")
	assert.Contains(t, html, "opened acme/staging#42")
	assert.Contains(t, html, "awaiting approval")
	assert.Contains(t, html, `href="/approvals#apr_2"`)

	assert.Equal(t, "approved by operator console with edited arguments", timelineOf(evs[3]).Summary)
	assert.Equal(t, "tool", timelineOf(evs[2]).Category)
}
