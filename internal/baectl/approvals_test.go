package baectl

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// approvalsAPI answers the approvals routes as the admin API documents
// them, from a fixed pending approval, and records what it was sent.
type approvalsAPI struct {
	mu      sync.Mutex
	queries []string
	bodies  []map[string]any
	state   string
}

const pendingApproval = `{"id":"apr_0123456789abcdef0123456789abcdef","session_id":"ses_0123456789abcdef0123456789abcdef",
"turn_id":"trn_0123456789abcdef0123456789abcdef","tool_call":{"id":"toolu_1","kind":"mcp","name":"create_issue","server":"github",
"arguments":{"repo":"acme/prod","title":"Deploy"}},"deciders":"any_driver","deadline":"2026-01-02T03:04:05Z","on_timeout":"reject",
"state":"pending","requested_at":"2026-01-02T02:04:05Z"}`

func (a *approvalsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	problem := func(status int, typ, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "title": http.StatusText(status), "status": status, "detail": detail})
	}
	const id = "apr_0123456789abcdef0123456789abcdef"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/admin/v1/approvals":
		a.queries = append(a.queries, r.URL.RawQuery)
		_, _ = io.WriteString(w, `{"items":[`+pendingApproval+`],"next_cursor":null}`)
	case r.Method == http.MethodGet && r.URL.Path == "/admin/v1/approvals/"+id:
		doc := strings.TrimSuffix(strings.TrimSpace(pendingApproval), "}") + `,"context":[{"id":"evt_1","client_key_id":"key_1",
"event_type":"client.message.send","payload":{"content":"open the deploy issue"},"created_at":"2026-01-02T02:04:00Z"}]}`
		_, _ = io.WriteString(w, doc)
	case r.Method == http.MethodPost && r.URL.Path == "/admin/v1/approvals/"+id+"/decision":
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			problem(http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		a.bodies = append(a.bodies, body)
		if a.state != "" {
			problem(http.StatusConflict, "approval_not_pending", "approval "+id+" is already "+a.state)
			return
		}
		if args, ok := body["arguments"].(map[string]any); ok && args["title"] == nil {
			problem(http.StatusUnprocessableEntity, "approval_arguments_invalid", "arguments: missing property 'title'")
			return
		}
		var doc map[string]any
		_ = json.Unmarshal([]byte(pendingApproval), &doc)
		a.state = map[string]string{"approve": "approved", "reject": "rejected"}[body["decision"].(string)]
		doc["state"] = a.state
		decision := map[string]any{"decided_by": map[string]any{"kind": "operator", "operator": body["operator"]}, "decided_at": "2026-01-02T02:10:00Z"}
		if body["arguments"] != nil {
			decision["arguments"] = body["arguments"]
		}
		if body["message"] != nil {
			decision["message"] = body["message"]
		}
		doc["decision"] = decision
		_ = json.NewEncoder(w).Encode(doc)
	default:
		problem(http.StatusNotFound, "not_found", "no approval at "+r.URL.Path)
	}
}

// TestApprovalCommands drives list/get/approve/reject approval against the
// documented routes: the query and bodies sent, the human and --json
// output, usage errors before any call, and the server's refusals.
func TestApprovalCommands(t *testing.T) {
	api := &approvalsAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	env := map[string]string{"BAE_ADMIN_ADDR": srv.URL, "BAE_ADMIN_TOKEN": "bae_admin_test"}
	const id = "apr_0123456789abcdef0123456789abcdef"

	r := runCLI(t, env, "list", "approvals")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Regexp(t, `^ID\s+SESSION_ID\s+STATE\s+KIND\s+TOOL\s+ARGUMENTS\s+DECIDERS\s+DEADLINE\n`, r.stdout)
	assert.Regexp(t, id+`\s+ses_\S+\s+pending\s+mcp\s+github/create_issue\s+\{"repo":"acme/prod","title":"Deploy"\}\s+any_driver`, r.stdout)
	r = runCLI(t, env, "list", "approvals", "--state", "decided", "--session", "ses_x", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var items []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &items), r.stdout)
	require.Len(t, items, 1)
	assert.Equal(t, []string{"limit=200&state=pending", "limit=200&session_id=ses_x&state=decided"}, api.queries)
	r = runCLI(t, env, "list", "approvals", "--state", "waiting")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--state must be pending or decided")

	r = runCLI(t, env, "get", "approval", id)
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, want := range []string{"tool:", "github/create_issue (mcp)", `arguments:`, `{"repo":"acme/prod","title":"Deploy"}`,
		"deadline:", "2026-01-02T03:04:05Z (then reject)", "context:", "client.message.send", "open the deploy issue"} {
		assert.Contains(t, r.stdout, want)
	}
	r = runCLI(t, env, "get", "approval", "apr_nope")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "(404 not_found)")

	// Usage errors never reach the server.
	r = runCLI(t, env, "approve", "approval", id, "--arguments", `["not","an","object"]`)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--arguments: not a JSON object")
	r = runCLI(t, env, "reject", "approval", id)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--message is required")
	assert.Empty(t, api.bodies)

	// Edited arguments the tool's schema refuses: the server's 422.
	r = runCLI(t, env, "approve", "approval", id, "--arguments", `{"repo":"acme/prod"}`)
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "missing property 'title' (422 approval_arguments_invalid)")

	r = runCLI(t, env, "approve", "approval", id, "--arguments", `{"repo":"acme/prod","title":"Deploy v2"}`, "--operator", "alice")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "approved "+id)
	assert.Regexp(t, `decided_by:\s+operator alice`, r.stdout)
	assert.Regexp(t, `approved_arguments:\s+\{"repo":"acme/prod","title":"Deploy v2"\}`, r.stdout)
	assert.Equal(t, map[string]any{"decision": "approve", "operator": "alice",
		"arguments": map[string]any{"repo": "acme/prod", "title": "Deploy v2"}}, api.bodies[1])

	// A second decision loses: the documented conflict.
	r = runCLI(t, env, "reject", "approval", id, "--message", "not on a Friday")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "is already approved (409 approval_not_pending)")
	assert.Equal(t, map[string]any{"decision": "reject", "message": "not on a Friday"}, api.bodies[2])

	api.state = ""
	r = runCLI(t, env, "reject", "approval", id, "--message", "not on a Friday", "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var doc approval
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	assert.Equal(t, "rejected", doc.State)
	assert.Equal(t, "not on a Friday", doc.Decision.Message)
}
