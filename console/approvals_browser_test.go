package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// issueTracker is an MCP server with one tool, create_issue, that records
// the arguments of every call it runs.
type issueTracker struct {
	mu    sync.Mutex
	calls []map[string]any
}

func (it *issueTracker) ran() []map[string]any {
	it.mu.Lock()
	defer it.mu.Unlock()
	return append([]map[string]any(nil), it.calls...)
}

func startIssueTracker(t *testing.T) (*issueTracker, string) {
	it := &issueTracker{}
	s := server.NewMCPServer("github", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("create_issue", mcp.WithDescription("Open an issue"),
		mcp.WithString("repo", mcp.Required()), mcp.WithString("title", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			it.mu.Lock()
			it.calls = append(it.calls, req.GetArguments())
			it.mu.Unlock()
			return mcp.NewToolResultText(fmt.Sprintf("opened %s#42", req.GetString("repo", ""))), nil
		})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateLess(true)))
	t.Cleanup(ts.Close)
	return it, ts.URL + "/mcp"
}

// TestConsoleApprovals walks the approvals page: a turn's MCP call held by
// the profile's policy appears live on the page while the driver's
// sendMessage stays open; arguments that fail the tool's schema are
// refused on the card, keeping what was typed; approved with edited
// arguments, the tool runs once with them, the driver's turn completes,
// and the session's transcript shows the request, the operator's decision
// and the result.
func TestConsoleApprovals(t *testing.T) {
	fake := fakeprovider.New(t)
	tracker, mcpURL := startIssueTracker(t)
	srv := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "primary"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "literal-token"

[[mcp.servers]]
name = "github"
transport = "http"
url = %q
`, fake.Lane("primary").URL(), mcpURL), Env: map[string]string{"BAE_CONSOLE_ADDR": "127.0.0.1:0", "BAE_CONSOLE_PASSWORD": consolePassword}})
	pid := srv.Profile(t, map[string]any{"name": "deployer", "primary_provider": "primary", "mcp_servers": []string{"github"}, "allowed_tools": []string{},
		"approvals": map[string]any{"rules": []any{map[string]any{
			"kind": "mcp", "server": "github", "tool": "create_*", "deciders": "any_driver", "timeout": "1h", "on_timeout": "reject",
		}}}})
	_, key := srv.Key(t, pid)
	sid, sk := srv.Open(t, key, map[string]any{"client_version": "approvals/1.0"})
	require.NotNil(t, testenv.Terminal(t, srv.Call(t, sid, sk, "session.registerDriver", nil))["result"])

	b := newBrowser(t, srv.ConsoleURL)
	b.login()
	b.do(chromedp.Navigate(b.url+"/approvals"), chromedp.WaitVisible(chromedp.CSS("#no-approvals")))
	b.waitFor(`!document.getElementById('live').hidden`)

	// A BAE client's turn: its stream stays open while the call waits.
	fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_gh", "create_issue", map[string]any{"repo": "acme/prod", "title": "Deploy 1.4"}).WithText("I'll open the deploy issue."),
		fakeprovider.Text("Opened acme/staging#42."),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	turn := srv.RPCStream(t, ctx, sid, sk, send(1, "Open the deploy issue for 1.4"))

	// It appears without a reload.
	b.waitFor(`document.querySelector('#approval-cards article[data-approval]') !== null`)
	id := run(b, chromedp.Evaluate[string](`document.querySelector('#approval-cards article[data-approval]').getAttribute('data-approval')`))
	card := `article[data-approval="` + id + `"]`
	assert.Contains(t, b.text(card+" header"), "github/create_issue")
	assert.Contains(t, b.text(card+" .approval-args"), `"repo": "acme/prod"`)
	b.do(chromedp.Click(chromedp.CSS(card + " .approval-context summary")))
	assert.Contains(t, b.text(card+" .approval-context"), "Open the deploy issue for 1.4")
	assert.Empty(t, tracker.ran(), "nothing runs before a decision")
	b.screenshot("approvals")

	// Arguments that fail the tool's schema: refused on the card, kept.
	b.do(chromedp.SetValue(chromedp.CSS("#args-"+id), `{"repo": 5}`), chromedp.Click(chromedp.CSS("#approve-"+id)))
	b.waitFor(`document.querySelector('` + card + ` .alert.error') !== null`)
	assert.Contains(t, b.text(card+" .alert.error"), "approval_arguments_invalid")
	assert.JSONEq(t, `{"repo": 5}`, run(b, chromedp.Evaluate[string](`document.getElementById('args-`+id+`').value`)))
	assert.Empty(t, tracker.ran())

	// Approved with edited arguments.
	b.do(chromedp.SetValue(chromedp.CSS("#args-"+id), `{"repo": "acme/staging", "title": "Deploy 1.4"}`), chromedp.Click(chromedp.CSS("#approve-"+id)))
	b.do(chromedp.WaitVisible(chromedp.CSS("#decided")))
	assert.Contains(t, b.text("#decided"), "approved")
	var term map[string]any
	for line := range turn.Lines() {
		if line["id"] != nil {
			term = line
		}
	}
	require.NotNil(t, term, "the driver's sendMessage completes after the approval")
	require.Nil(t, term["error"], "%v", term["error"])
	raw, _ := json.Marshal(term["result"])
	assert.Contains(t, string(raw), "Opened acme/staging#42.")
	assert.Equal(t, []map[string]any{{"repo": "acme/staging", "title": "Deploy 1.4"}}, tracker.ran(), "the tool ran once, with the approved arguments")

	// The transcript: request, who decided (with the edit), result.
	b.do(chromedp.Click(chromedp.CSS("#decided a")))
	b.do(chromedp.WaitVisible(chromedp.CSS("#transcript")))
	b.waitFor(`[...document.querySelectorAll('#transcript .bubble.assistant')].some(n => n.innerText.includes('Opened acme/staging#42.'))`)
	tool := `#transcript details.tool`
	b.do(chromedp.Click(chromedp.CSS(tool + " summary")))
	body := b.text(tool)
	assert.Contains(t, body, "Approval requested")
	assert.Contains(t, body, "any_driver")
	assert.Contains(t, body, "Approved by operator console")
	assert.Contains(t, body, `"repo": "acme/staging"`, "the approved arguments")
	assert.Contains(t, body, "opened acme/staging#42", "the result beside the decision")
	b.do(chromedp.ScrollIntoView(chromedp.CSS(tool)))
	b.screenshot("session-approval")
	b.do(chromedp.Navigate(b.url+"/approvals"), chromedp.WaitVisible(chromedp.CSS("#no-approvals")))
}
