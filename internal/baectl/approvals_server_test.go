package baectl

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestApprovalCommandsAgainstServer: a profile created with --approvals
// holds an MCP call; list/get show it with its conversation, a schema
// failure and a late decision are the server's problems, and an edited
// approval lets the driver's turn finish.
func TestApprovalCommandsAgainstServer(t *testing.T) {
	ms := server.NewMCPServer("tracker", "1.0.0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("create_issue", mcp.WithDescription("Open an issue"), mcp.WithString("title", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("opened " + req.GetString("title", "")), nil
		})
	mts := httptest.NewServer(server.NewStreamableHTTPServer(ms, server.WithStateLess(true)))
	t.Cleanup(mts.Close)
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()) +
		fmt.Sprintf("\n[[mcp.servers]]\nname = \"tracker\"\ntransport = \"http\"\nurl = %q\n", mts.URL+"/mcp")})
	c := newCLI(t, s)

	r := c.run("create", "profile", "held", "primary", "--mcp-server", "tracker", "--approvals", `{"rules":[{"kind":"mcp","timeout":"1ms"}]}`)
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "invalid_approval_policy")
	created := okJSON[map[string]any](c, "create", "profile", "held", "primary", "--mcp-server", "tracker",
		"--approvals", `{"rules":[{"kind":"mcp","server":"tracker","tool":"create_*","deciders":"operators"}]}`)
	pid := created["id"].(string)
	assert.Regexp(t, `approvals:\s+\{"rules":\[\{.*"deciders":"operators"`, c.ok("get", "profile", pid).stdout)

	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, map[string]any{"client_version": "baectl-test"})
	s.Call(t, sid, sk, "session.registerDriver", nil)
	fake.Enqueue(fakeprovider.ToolUse("tu_1", "create_issue", map[string]any{"title": "Deploy"}), fakeprovider.Text("Opened."))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turn := s.RPCStream(t, ctx, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
		"params": map[string]any{"message": map[string]any{"content": "open the deploy issue"}}})

	var id string
	require.Eventually(t, func() bool {
		items := okJSON[[]approval](c, "list", "approvals", "--session", sid)
		if len(items) == 1 {
			id = items[0].ID
		}
		return id != ""
	}, 30*time.Second, 100*time.Millisecond)
	out := c.ok("list", "approvals").stdout
	assert.Regexp(t, id+`\s+`+sid+`\s+pending\s+mcp\s+tracker/create_issue\s+\{"title":"Deploy"\}\s+operators`, out)
	out = c.ok("get", "approval", id).stdout
	assert.Contains(t, out, "open the deploy issue", "the conversation before the request")

	r = c.run("approve", "approval", id, "--arguments", `{"title":5}`)
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "approval_arguments_invalid")
	out = c.ok("approve", "approval", id, "--arguments", `{"title":"Deploy v2"}`, "--operator", "alice").stdout
	assert.Contains(t, out, "approved "+id)
	assert.Regexp(t, `decided_by:\s+operator alice`, out)
	var term map[string]any
	for line := range turn.Lines() {
		if line["id"] != nil {
			term = line
		}
	}
	require.NotNil(t, term)
	assert.Nil(t, term["error"])

	r = c.run("reject", "approval", id, "--message", "too late")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "409 approval_not_pending")
	assert.Contains(t, c.ok("list", "approvals", "--state", "decided").stdout, id)
	assert.Contains(t, c.ok("list", "approvals").stdout, "no pending approvals")
}
