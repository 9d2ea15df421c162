package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/sdk"
)

// TestApprovals runs the SDK's approval handler and DecideApproval against
// a real server whose profiles hold an MCP tool for approval: the handler
// approves with edited arguments on the turn's own stream and the tool
// runs once with them; a driver the policy leaves out, a decision after
// the fact and an unknown id get their typed errors; a rejection reaches
// the model as the tool's error result.
func TestApprovals(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL and starts baesrv")
	}
	var mu sync.Mutex
	var ran []map[string]any
	ms := server.NewMCPServer("tracker", "1.0.0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("create_issue", mcp.WithDescription("Open an issue"), mcp.WithString("title", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			ran = append(ran, req.GetArguments())
			mu.Unlock()
			return mcp.NewToolResultText("opened " + req.GetString("title", "")), nil
		})
	mts := httptest.NewServer(server.NewStreamableHTTPServer(ms, server.WithStateLess(true)))
	t.Cleanup(mts.Close)
	fake := fakeprovider.New(t)
	lane := fake.Lane("approvals")
	srv := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "approvals"
provider = "anthropic"
base_url = %q
model = "fake-model"
auth_token = "test"

[[mcp.servers]]
name = "tracker"
transport = "http"
url = %q
`, lane.URL(), mts.URL+"/mcp")})
	profile := func(name string, deciders sdk.Deciders) sdk.Config {
		pid := srv.Profile(t, map[string]any{"name": name, "primary_provider": "approvals", "mcp_servers": []string{"tracker"}, "allowed_tools": []string{},
			"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp", "server": "tracker", "tool": "create_*", "deciders": deciders}}}})
		_, key := srv.Key(t, pid)
		return sdk.Config{ServerURL: srv.ClientURL, ClientKey: key, ClientVersion: "sdk-itest/approvals"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("handler approves with edited arguments", func(t *testing.T) {
		lane.Enqueue(fakeprovider.ToolUse("tu_a", "create_issue", map[string]any{"title": "Deploy"}), fakeprovider.Text("Opened it."))
		var got []sdk.ApprovalRequest
		var outcomes []sdk.ApprovalOutcome
		s, err := sdk.Connect(ctx, profile("approve-edit", sdk.DecidersAnyDriver),
			sdk.WithApprovalHandler(func(_ context.Context, r sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
				got = append(got, r)
				return sdk.ApproveWith(map[string]any{"title": "Deploy v2"}), nil
			}),
			sdk.WithApprovalOutcomes(func(_ context.Context, o sdk.ApprovalOutcome) error { outcomes = append(outcomes, o); return nil }))
		require.NoError(t, err)
		reply, err := s.Send(ctx, "open the deploy issue")
		require.NoError(t, err)
		assert.Equal(t, "Opened it.", reply.Text())
		require.Len(t, got, 1)
		assert.Equal(t, "create_issue", got[0].ToolCall.Name)
		assert.JSONEq(t, `{"title":"Deploy"}`, string(got[0].ToolCall.Arguments), "the model's arguments")
		assert.Equal(t, sdk.DecidersAnyDriver, got[0].Deciders)
		assert.True(t, got[0].Deadline.After(time.Now()))
		require.NotEmpty(t, outcomes)
		assert.Equal(t, sdk.ApprovalApproved, outcomes[0].Decision)
		assert.Equal(t, events.DecidedByDriver, outcomes[0].DecidedBy.Kind)
		mu.Lock()
		assert.Equal(t, []map[string]any{{"title": "Deploy v2"}}, ran, "ran once, with the approved arguments")
		mu.Unlock()

		_, err = s.DecideApproval(ctx, got[0].ApprovalID, sdk.Approve())
		assert.ErrorIs(t, err, sdk.ErrApprovalNotPending)
		_, err = s.DecideApproval(ctx, "apr_00000000000000000000000000000000", sdk.Approve())
		assert.ErrorIs(t, err, sdk.ErrApprovalNotFound)
	})

	t.Run("operators only, then a rejection the model reads", func(t *testing.T) {
		lane.Enqueue(fakeprovider.ToolUse("tu_b", "create_issue", map[string]any{"title": "Friday deploy"}), fakeprovider.Text("Understood."))
		requests := make(chan sdk.ApprovalRequest, 1)
		s, err := sdk.Connect(ctx, profile("operators-only", sdk.DecidersOperators),
			sdk.WithApprovalHandler(func(_ context.Context, r sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
				requests <- r
				return sdk.Abstain(), nil
			}))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := s.Send(ctx, "deploy on friday")
			done <- err
		}()
		var r sdk.ApprovalRequest
		select {
		case r = <-requests:
		case <-ctx.Done():
			t.Fatal("no approval request reached the handler")
		}
		_, err = s.DecideApproval(ctx, r.ApprovalID, sdk.Approve())
		assert.ErrorIs(t, err, sdk.ErrApprovalNotAllowed)
		resp := srv.Admin(t, "POST", "/admin/v1/approvals/"+r.ApprovalID+"/decision", map[string]any{"decision": "reject", "message": "not on a Friday", "operator": "ops"})
		require.Equal(t, 200, resp.Status, string(resp.Raw))
		require.NoError(t, <-done)
		reqs := fake.Requests()
		last := reqs[len(reqs)-1].Messages()
		raw, _ := json.Marshal(last[len(last)-1])
		assert.Contains(t, string(raw), `"is_error":true`)
		assert.True(t, strings.Contains(string(raw), "not on a Friday"), "%s", raw)
	})
}
