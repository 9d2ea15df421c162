package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/devstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
	"github.com/bae-go/bae-go/workflows"
)

// ---- helpers -------------------------------------------------------------

// approvalEnv is an env with the fs MCP server, a strict fake (it refuses
// a tool_use without its tool_result, as a real provider does) and a
// profile holding create_issue under the given rule fields.
func approvalEnv(t *testing.T, rule map[string]any) (*env, string) {
	t.Helper()
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	e.fake.Strict(true)
	r := map[string]any{"kind": "mcp", "server": "fs", "tool": "create_*"}
	for k, v := range rule {
		r[k] = v
	}
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{r}}})
	return e, pid
}

// openDriver opens and registers a driver on profile pid.
func (e *env) openDriver(pid string) *driver {
	e.t.Helper()
	d := e.openOn(pid, nil)
	d.register()
	return d
}

var approvalsOn = http.Header{"Bae-Approvals": []string{"on"}}

// streamOptedIn starts a sendMessage that opted into approval notifications.
func (d *driver) streamOptedIn(ctx context.Context, content any) *testenv.Stream {
	return d.e.srv.RPCStreamHeader(d.e.t, ctx, d.sid, d.sk, d.request(content), approvalsOn)
}

// until reads st until an object satisfies pick, returning everything read.
func until(t *testing.T, st *testenv.Stream, pick func(map[string]any) bool) []map[string]any {
	t.Helper()
	var seen []map[string]any
	for {
		m := st.Next(time.Minute)
		require.NotNil(t, m, "the stream ended or stalled; read so far: %v", seen)
		seen = append(seen, m)
		if pick(m) {
			return seen
		}
	}
}

func isMethod(name string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == name }
}

func isTerminal(m map[string]any) bool { _, ok := m["id"]; return ok }

// pendingApproval waits for the session's one pending approval (admin list).
func (e *env) pendingApproval(sid string) map[string]any {
	e.t.Helper()
	var item map[string]any
	require.Eventually(e.t, func() bool {
		r := e.srv.Admin(e.t, http.MethodGet, "/admin/v1/approvals?state=pending&session_id="+sid, nil)
		require.Equal(e.t, http.StatusOK, r.Status, string(r.Raw))
		items := r.Body["items"].([]any)
		if len(items) == 0 {
			return false
		}
		item = items[0].(map[string]any)
		return true
	}, time.Minute, 50*time.Millisecond)
	return item
}

// holdCall sends "file it" on d and waits for the approval that holds its
// call: (a context for the rest of the test, the turn's open stream, the
// approval id). The stream is closed and the context ended with the test.
func (d *driver) holdCall() (context.Context, *testenv.Stream, string) {
	t := d.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	st := d.stream(ctx, "file it")
	t.Cleanup(st.Close)
	return ctx, st, d.e.pendingApproval(d.sid)["id"].(string)
}

// decideAdmin posts an operator's decision.
func (e *env) decideAdmin(id string, body map[string]any) testenv.Response {
	e.t.Helper()
	return e.srv.Admin(e.t, http.MethodPost, "/admin/v1/approvals/"+id+"/decision", body)
}

// decide is session.decideApproval by d.
func (d *driver) decide(params map[string]any) map[string]any {
	d.e.t.Helper()
	return d.call("session.decideApproval", params)
}

func issueCall(repo string) fakeprovider.Reply {
	return fakeprovider.ToolUse("tu_1", "create_issue", map[string]any{"repo": repo, "title": "Fix it"})
}

// lastToolResult is the tool_result block of the provider request after
// the held call.
func lastToolResult(t *testing.T, e *env) map[string]any {
	t.Helper()
	reqs := e.fake.Requests()
	require.GreaterOrEqual(t, len(reqs), 2)
	msgs := reqs[len(reqs)-1].Messages()
	last := msgs[len(msgs)-1]
	require.Equal(t, "user", last["role"])
	blocks := last["content"].([]any)
	require.Len(t, blocks, 1)
	return blocks[0].(map[string]any)
}

func contentText(t *testing.T, content any) string {
	t.Helper()
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, it := range c {
			b.WriteString(it.(map[string]any)["text"].(string))
		}
		return b.String()
	}
	t.Fatalf("unexpected content %v", content)
	return ""
}

// ---- policy --------------------------------------------------------------

// TestApprovalPolicyValidated: a profile's approvals policy is checked at
// save: malformed is 400, a value out of range 422 invalid_approval_policy
// naming the rule and field; a good one is stored with its defaults.
func TestApprovalPolicyValidated(t *testing.T) {
	e := newEnv(t, envOpts{})
	post := func(approvals any) testenv.Response {
		return e.srv.Admin(t, http.MethodPost, "/admin/v1/profiles", map[string]any{
			"name": fmt.Sprintf("ap-%d", profileSeq.Add(1)), "primary_provider": "primary", "approvals": approvals,
		})
	}
	for _, tc := range []struct {
		approvals any
		status    int
		slug      string
		field     string
	}{
		{"yes", 400, "bad_request", "approvals"},
		{map[string]any{"rules": "x"}, 400, "bad_request", "approvals.rules"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "tool": 3}}}, 400, "bad_request", "approvals.rules[0].tool"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "surprise": "x"}}}, 400, "bad_request", "approvals.rules[0].surprise"},
		{map[string]any{"rules": []any{map[string]any{"kind": "client"}}}, 422, "invalid_approval_policy", "approvals.rules[0].kind"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp"}, map[string]any{"kind": "sandbox_exec", "timeout": "0.5s"}}}, 422, "invalid_approval_policy", "approvals.rules[1].timeout"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "timeout": "721h"}}}, 422, "invalid_approval_policy", "approvals.rules[0].timeout"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "timeout": "soon"}}}, 422, "invalid_approval_policy", "approvals.rules[0].timeout"},
		{map[string]any{"rules": []any{map[string]any{"kind": "subagent", "deciders": "anyone"}}}, 422, "invalid_approval_policy", "approvals.rules[0].deciders"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "on_timeout": "ignore"}}}, 422, "invalid_approval_policy", "approvals.rules[0].on_timeout"},
		{map[string]any{"rules": []any{map[string]any{"kind": "sandbox_exec", "server": "fs"}}}, 422, "invalid_approval_policy", "approvals.rules[0].server"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "tool": "[x"}}}, 422, "invalid_approval_policy", "approvals.rules[0].tool"},
		{map[string]any{"rules": []any{map[string]any{"kind": "mcp", "args_match": map[string]any{"repo": "[x"}}}}, 422, "invalid_approval_policy", "approvals.rules[0].args_match.repo"},
	} {
		r := post(tc.approvals)
		assert.Equal(t, tc.status, r.Status, "%v: %s", tc.approvals, r.Raw)
		assert.Equal(t, tc.slug, r.Body["type"], "%v", tc.approvals)
		assert.Contains(t, r.Body["detail"], tc.field, "%v", tc.approvals)
	}

	r := post(map[string]any{"rules": []any{map[string]any{"kind": "mcp", "server": "gh*", "tool": "create_*", "args_match": map[string]any{"repo": "acme/prod*"}}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	got := e.srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+r.Body["id"].(string), nil)
	assert.Equal(t, map[string]any{"rules": []any{map[string]any{
		"kind": "mcp", "server": "gh*", "tool": "create_*", "args_match": map[string]any{"repo": "acme/prod*"},
		"deciders": "any_driver", "timeout": "24h0m0s", "on_timeout": "reject",
	}}}, got.Body["approvals"])
	// No policy: the profile shows none (BAE's behaviour).
	plain := e.srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+e.pid, nil)
	assert.NotContains(t, plain.Body, "approvals")
}

// ---- decisions -----------------------------------------------------------

// TestApprovalApprove: the held call waits with its request on the opted-in
// stream; a driver approves through session.decideApproval, the tool runs
// with the model's arguments, and the stream completes. A second driver's
// message queues behind the held turn (FIFO).
func TestApprovalApprove(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."), fakeprovider.Text("Second."))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.streamOptedIn(ctx, "file it")
	defer st.Close()
	seen := until(t, st, isMethod("session.approvalRequest"))
	note := seen[len(seen)-1]["params"].(map[string]any)
	id := note["approval_id"].(string)
	assert.True(t, strings.HasPrefix(id, "apr_"), id)
	assert.Equal(t, map[string]any{"id": "tu_1", "kind": "mcp", "name": "create_issue", "server": "fs",
		"arguments": map[string]any{"repo": "acme/prod", "title": "Fix it"}}, note["tool_call"])
	assert.Equal(t, "any_driver", note["deciders"])
	assert.Equal(t, "reject", note["on_timeout"])
	assert.Contains(t, testenv.EventTypes(seen), "approval.request", "the opted-in stream carries the event too")
	assert.NotContains(t, testenv.EventTypes(seen), "mcp.request", "the call waits")

	// The admin view shows it pending, with the conversation around it.
	got := e.srv.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil)
	require.Equal(t, http.StatusOK, got.Status, string(got.Raw))
	assert.Equal(t, "pending", got.Body["state"])
	assert.Equal(t, d.sid, got.Body["session_id"])
	ctxEvs := got.Body["context"].([]any)
	require.NotEmpty(t, ctxEvs)
	assert.Equal(t, "approval.request", ctxEvs[len(ctxEvs)-1].(map[string]any)["event_type"])

	// FIFO: the other driver's message waits behind the held turn.
	second := other.stream(ctx, "me next")
	defer second.Close()
	require.Eventually(t, func() bool { return len(e.control(d.sid).QueuedTurns) == 1 }, time.Minute, 50*time.Millisecond)
	assert.Len(t, e.fake.Requests(), 1, "nothing runs while the call is held")

	res := result(t, d.decide(map[string]any{"approval_id": id, "decision": "approve"}))
	assert.Equal(t, map[string]any{"approval_id": id, "decision": "approved", "decided_by": map[string]any{"kind": "driver", "client_id": d.keyID}}, res)

	rest := until(t, st, isTerminal)
	all := append(seen, rest...)
	notes := 0
	for _, m := range all {
		if m["method"] == "session.approvalDecision" {
			notes++
			assert.Equal(t, map[string]any{"approval_id": id, "decision": "approved", "decided_by": map[string]any{"kind": "driver", "client_id": d.keyID}}, m["params"])
		}
	}
	assert.Equal(t, 1, notes)
	term := rest[len(rest)-1]
	assert.Equal(t, "Filed.", firstText(message(term)))
	evs := resultEvents(term)
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "tool.call", "approval.request",
		"approval.decision", "mcp.request", "mcp.response", "tool.result", "provider.request", "provider.response", "server.message.send"}, types(evs))
	tr := lastToolResult(t, e)
	assert.Equal(t, "created acme/prod: Fix it", contentText(t, tr["content"]))

	// The queued message ran after it.
	_, term2 := readTurn(t, second)
	assert.Equal(t, "Second.", firstText(message(term2)))
	assert.Zero(t, e.fake.StrictRefusals())

	ap := e.srv.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil)
	assert.Equal(t, "approved", ap.Body["state"])
	assert.Equal(t, map[string]any{"kind": "driver", "client_id": d.keyID}, ap.Body["decision"].(map[string]any)["decided_by"])
}

// control reads the session workflow's turn gate.
func (e *env) control(sid string) workflows.ControlView {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := e.srv.Temporal.QueryWorkflow(ctx, sid, "", workflows.QueryControl)
	require.NoError(e.t, err)
	var view workflows.ControlView
	require.NoError(e.t, v.Get(&view))
	return view
}

// readTurn reads a stream to its terminal: (everything before it, the terminal).
func readTurn(t *testing.T, st *testenv.Stream) ([]map[string]any, map[string]any) {
	t.Helper()
	all := until(t, st, isTerminal)
	return all[:len(all)-1], all[len(all)-1]
}

// TestApprovalEditedArguments: an operator approves with edited arguments;
// arguments that do not fit the tool's input schema are refused (422 on
// the admin API, -32602 on the client API) and change nothing; the tool
// runs with the edit and the log keeps both.
func TestApprovalEditedArguments(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."))
	_, st, id := d.holdCall()

	bad := e.decideAdmin(id, map[string]any{"decision": "approve", "arguments": map[string]any{"repo": 5, "title": "x"}})
	assert.Equal(t, http.StatusUnprocessableEntity, bad.Status, string(bad.Raw))
	assert.Equal(t, "approval_arguments_invalid", bad.Body["type"])
	msg := rpcError(t, d.decide(map[string]any{"approval_id": id, "decision": "approve", "arguments": map[string]any{"repo": "acme/x"}}), -32602)
	assert.True(t, strings.HasPrefix(msg, "Invalid params: approval_arguments_invalid: "), msg)
	assert.Equal(t, http.StatusBadRequest, e.decideAdmin(id, map[string]any{"decision": "maybe"}).Status)
	assert.Equal(t, http.StatusBadRequest, e.decideAdmin(id, map[string]any{"decision": "reject", "arguments": map[string]any{}}).Status)
	assert.Equal(t, "pending", e.pendingApproval(d.sid)["state"])

	edited := map[string]any{"repo": "acme/staging", "title": "Fix it gently"}
	ok := e.decideAdmin(id, map[string]any{"decision": "approve", "arguments": edited, "operator": "alice"})
	require.Equal(t, http.StatusOK, ok.Status, string(ok.Raw))
	assert.Equal(t, "approved", ok.Body["state"])
	assert.Equal(t, map[string]any{"arguments": edited, "decided_by": map[string]any{"kind": "operator", "operator": "alice"}, "decided_at": ok.Body["decision"].(map[string]any)["decided_at"]}, ok.Body["decision"])

	_, term := readTurn(t, st)
	assert.Equal(t, "Filed.", firstText(message(term)))
	assert.Equal(t, "created acme/staging: Fix it gently", contentText(t, lastToolResult(t, e)["content"]))
	evs := d.allEvents()
	req := ofType(evs, "approval.request")
	require.Len(t, req, 1)
	assert.Equal(t, map[string]any{"repo": "acme/prod", "title": "Fix it"}, payload(req[0])["arguments"], "the model's arguments")
	decEv := ofType(evs, "approval.decision")
	require.Len(t, decEv, 1)
	assert.Equal(t, edited, payload(decEv[0])["arguments"], "the approved arguments")
	assert.Equal(t, edited, payload(ofType(evs, "mcp.request")[0])["input"])
	assert.Equal(t, map[string]any{"repo": "acme/prod", "title": "Fix it"}, payload(ofType(evs, "tool.call")[0])["input"])
}

// TestApprovalReject: a rejection reaches the model as the call's error
// tool_result carrying the decider's message, accepted by the strict fake;
// the tool never runs. The BAE client's stream shows nothing of approvals.
func TestApprovalReject(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Understood."))
	_, st, id := d.holdCall()

	res := result(t, other.decide(map[string]any{"approval_id": id, "decision": "reject", "message": "not on prod, please"}))
	assert.Equal(t, "rejected", res["decision"])
	assert.Equal(t, map[string]any{"kind": "driver", "client_id": other.keyID}, res["decided_by"])

	notes, term := readTurn(t, st)
	assert.Equal(t, "Understood.", firstText(message(term)))
	for _, n := range notes {
		assert.NotContains(t, []any{"session.approvalRequest", "session.approvalDecision"}, n["method"])
	}
	assert.NotContains(t, testenv.EventTypes(notes), "approval.request", "a BAE stream carries nothing of approvals")
	assert.NotContains(t, types(resultEvents(term)), "approval.decision")
	assert.Equal(t, []string{"client.message.send", "provider.request", "provider.response", "tool.call", "tool.result",
		"provider.request", "provider.response", "server.message.send"}, types(resultEvents(term)))

	tr := lastToolResult(t, e)
	assert.Equal(t, "tu_1", tr["tool_use_id"])
	assert.Equal(t, true, tr["is_error"])
	assert.Contains(t, contentText(t, tr["content"]), "not on prod, please")
	assert.Zero(t, e.fake.StrictRefusals())
	evs := d.allEvents()
	assert.Empty(t, ofType(evs, "mcp.request"), "the tool never ran")
	dec := payload(ofType(evs, "approval.decision")[0])
	assert.Equal(t, map[string]any{"approval_id": id, "decision": "rejected", "message": "not on prod, please",
		"decided_by": map[string]any{"kind": "driver", "client_id": other.keyID}}, dec)

	// Decided: a second decision is refused as not pending.
	msg := rpcError(t, d.decide(map[string]any{"approval_id": id, "decision": "approve"}), -32000)
	assert.True(t, strings.HasPrefix(msg, "approval_not_pending: "), msg)
	conflict := e.decideAdmin(id, map[string]any{"decision": "approve"})
	assert.Equal(t, http.StatusConflict, conflict.Status)
	assert.Equal(t, "approval_not_pending", conflict.Body["type"])
	// Unknown ids.
	msg = rpcError(t, d.decide(map[string]any{"approval_id": "apr_nope", "decision": "approve"}), -32602)
	assert.True(t, strings.HasPrefix(msg, "Invalid params: approval_not_found: "), msg)
	assert.Equal(t, http.StatusNotFound, e.decideAdmin("apr_nope", map[string]any{"decision": "approve"}).Status)
}

// TestApprovalRejectOpenAI: on an OpenAI provider the rejection reaches the
// model as the tool message the code base renders for a tool error.
func TestApprovalRejectOpenAI(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	e.fake.Strict(true)
	pid := e.srv.Profile(t, map[string]any{"name": "oa", "primary_provider": "fallback", "allowed_tools": []string{}, "mcp_servers": []string{"fs"},
		"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp"}}}})
	d := e.openDriver(pid)
	e.fake.Lane("fallback").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Understood."))
	_, st, id := d.holdCall()
	require.Equal(t, http.StatusOK, e.decideAdmin(id, map[string]any{"decision": "reject", "message": "no"}).Status)
	_, term := readTurn(t, st)
	assert.Equal(t, "Understood.", firstText(message(term)))
	reqs := e.fake.Requests()
	msgs := reqs[len(reqs)-1].Messages()
	last := msgs[len(msgs)-1]
	assert.Equal(t, "tool", last["role"])
	assert.Equal(t, "tu_1", last["tool_call_id"])
	assert.Contains(t, fmt.Sprint(last["content"]), "Reviewer's message: no")
	assert.Zero(t, e.fake.StrictRefusals())
}

// TestApprovalDeadline: the deadline is a workflow timer; on_timeout
// reject answers the model with an error result, on_timeout approve runs
// the tool. Either way the decision is recorded as expired by the deadline.
func TestApprovalDeadline(t *testing.T) {
	for _, tc := range []struct {
		onTimeout string
		ran       bool
	}{{"reject", false}, {"approve", true}} {
		t.Run(tc.onTimeout, func(t *testing.T) {
			e, pid := approvalEnv(t, map[string]any{"timeout": "2s", "on_timeout": tc.onTimeout})
			d := e.openDriver(pid)
			e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Done."))
			_, term := d.send("file it")
			require.NotNil(t, term["result"], "%v", term)
			assert.Equal(t, "Done.", firstText(message(term)))
			evs := d.allEvents()
			dec := ofType(evs, "approval.decision")
			require.Len(t, dec, 1)
			assert.Equal(t, "expired", payload(dec[0])["decision"])
			assert.Equal(t, map[string]any{"kind": "deadline"}, payload(dec[0])["decided_by"])
			tr := lastToolResult(t, e)
			if tc.ran {
				assert.Len(t, ofType(evs, "mcp.request"), 1)
				assert.Equal(t, "created acme/prod: Fix it", contentText(t, tr["content"]))
				assert.NotEqual(t, true, tr["is_error"])
			} else {
				assert.Empty(t, ofType(evs, "mcp.request"))
				assert.Equal(t, true, tr["is_error"])
				assert.Equal(t, events.ExpiredRejection, contentText(t, tr["content"]))
			}
			req := payload(ofType(evs, "approval.request")[0])
			deadline, err := time.Parse(time.RFC3339, req["deadline"].(string))
			require.NoError(t, err)
			requested, err := time.Parse(time.RFC3339, ofType(evs, "approval.request")[0]["created_at"].(string))
			require.NoError(t, err)
			assert.InDelta(t, 2*time.Second, deadline.Sub(requested), float64(time.Second))
			assert.Zero(t, e.fake.StrictRefusals())
		})
	}
}

// TestApprovalDisallowedDecider: deciders turn_driver refuses another
// driver (-32001 approval_not_allowed); operators refuses every driver;
// an operator may decide either. The workflow re-checks: a decision sent
// straight to it by a disallowed driver is refused there too.
func TestApprovalDisallowedDecider(t *testing.T) {
	e, pid := approvalEnv(t, map[string]any{"deciders": "turn_driver"})
	d := e.openDriver(pid)
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Done."), issueCall("acme/prod"), fakeprovider.Text("Done again."))
	ctx, st, id := d.holdCall()

	msg := rpcError(t, other.decide(map[string]any{"approval_id": id, "decision": "approve"}), -32001)
	assert.True(t, strings.HasPrefix(msg, "approval_not_allowed: "), msg)
	// A key that joined the session but never registered as a driver may
	// not decide (only the API knows who registered).
	keyID, key := e.srv.Key(t, pid)
	observer := &driver{e: e, keyID: keyID, key: key, sid: d.sid, sk: e.srv.Join(t, d.sid, key, map[string]any{})}
	msg = rpcError(t, observer.decide(map[string]any{"approval_id": id, "decision": "approve"}), -32001)
	assert.True(t, strings.HasPrefix(msg, "approval_not_allowed: only a registered driver"), msg)
	// Another session's approval is not found from this one.
	viewer := e.openOn(pid, nil)
	msg = rpcError(t, viewer.decide(map[string]any{"approval_id": id, "decision": "approve"}), -32602)
	assert.Contains(t, msg, "approval_not_found", "another session's approval is not found from this one")

	// Straight to the workflow, past the API's check: refused there too.
	h, err := e.srv.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: d.sid, UpdateName: workflows.UpdateDecideApproval, WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{workflows.ApprovalDecisionInput{ApprovalID: id, Approve: true, By: events.DecidedBy{Kind: events.DecidedByDriver, ClientID: other.keyID}}},
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, workflows.ErrApprovalNotAllowed, ae.Type())
	assert.Equal(t, "pending", e.pendingApproval(d.sid)["state"])

	res := result(t, d.decide(map[string]any{"approval_id": id, "decision": "approve"}))
	assert.Equal(t, "approved", res["decision"])
	readTurn(t, st)

	// operators: no driver may decide, an operator may.
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "ops-only", "primary_provider": "primary", "mcp_servers": []string{"fs"},
		"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp", "deciders": "operators"}}}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	st2 := d.stream(ctx, "again")
	defer st2.Close()
	id2 := e.pendingApproval(d.sid)["id"].(string)
	msg = rpcError(t, d.decide(map[string]any{"approval_id": id2, "decision": "approve"}), -32001)
	assert.Equal(t, "approval_not_allowed: only operators may decide this approval (admin API or console)", msg, "refused by the API, before the workflow")
	require.Equal(t, http.StatusOK, e.decideAdmin(id2, map[string]any{"decision": "approve"}).Status)
	_, term := readTurn(t, st2)
	assert.Equal(t, "Done again.", firstText(message(term)))
}

// TestApprovalRacingDecisions: decisions racing for one approval, through
// both surfaces and straight to the workflow: exactly one wins, every
// other is refused as approval_not_pending.
func TestApprovalRacingDecisions(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	other := e.joinOn(pid, d)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Done."), issueCall("acme/prod"), fakeprovider.Text("Done."))
	// Through the API: a driver and an operator at once.
	ctx, st, id := d.holdCall()
	var wg sync.WaitGroup
	var rpcTerm map[string]any
	var admin testenv.Response
	start := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-start
		rpcTerm = other.decide(map[string]any{"approval_id": id, "decision": "approve"})
	}()
	go func() {
		defer wg.Done()
		<-start
		admin = e.decideAdmin(id, map[string]any{"decision": "reject", "message": "no"})
	}()
	close(start)
	wg.Wait()
	rpcWon := rpcTerm["error"] == nil
	adminWon := admin.Status == http.StatusOK
	assert.True(t, rpcWon != adminWon, "exactly one wins: rpc %v, admin %d %s", rpcTerm, admin.Status, admin.Raw)
	if rpcWon {
		assert.Equal(t, http.StatusConflict, admin.Status)
		assert.Equal(t, "approval_not_pending", admin.Body["type"])
	} else {
		assert.True(t, strings.HasPrefix(rpcError(t, rpcTerm, -32000), "approval_not_pending: "))
	}
	readTurn(t, st)
	assert.Len(t, ofType(d.allEvents(), "approval.decision"), 1)

	// Straight to the workflow, past the API's pending check: several
	// updates at once, one winner.
	st2 := d.stream(ctx, "again")
	defer st2.Close()
	id2 := e.pendingApproval(d.sid)["id"].(string)
	const n = 4
	errs := make([]error, n)
	start2 := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start2
			h, err := e.srv.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: d.sid, UpdateName: workflows.UpdateDecideApproval, WaitForStage: client.WorkflowUpdateStageCompleted,
				Args: []any{workflows.ApprovalDecisionInput{ApprovalID: id2, Approve: i%2 == 0, By: events.DecidedBy{Kind: events.DecidedByOperator, Operator: fmt.Sprint(i)}}},
			})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			errs[i] = err
		}()
	}
	close(start2)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		var ae *temporal.ApplicationError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, workflows.ErrApprovalNotPending, ae.Type())
	}
	assert.Equal(t, 1, wins)
	readTurn(t, st2)
	assert.Len(t, ofType(d.allEvents(), "approval.decision"), 2)
	assert.Zero(t, e.fake.StrictRefusals())
}

// TestApprovalInterruptWhilePending: session.interrupt cancels the pending
// approval (recorded, naming who interrupted); the call never runs, is
// closed like any interrupted call, and the next turn goes on.
func TestApprovalInterruptWhilePending(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Next."))
	_, st, id := d.holdCall()

	res := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, true, res["interrupted"])
	_, term := readTurn(t, st)
	assert.Equal(t, true, term["result"].(map[string]any)["interrupted"])

	evs := d.allEvents()
	dec := ofType(evs, "approval.decision")
	require.Len(t, dec, 1)
	assert.Equal(t, map[string]any{"approval_id": id, "decision": "cancelled", "decided_by": map[string]any{"kind": "interrupt", "client_id": d.keyID}}, payload(dec[0]))
	assert.Empty(t, ofType(evs, "mcp.request"))
	assert.Len(t, ofType(evs, "server.message.interrupted"), 1)
	ap := e.srv.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil)
	assert.Equal(t, "cancelled", ap.Body["state"])
	msg := rpcError(t, d.decide(map[string]any{"approval_id": id, "decision": "approve"}), -32000)
	assert.True(t, strings.HasPrefix(msg, "approval_not_pending: "), msg)

	_, term = d.send("go on")
	assert.Equal(t, "Next.", firstText(message(term)))
	assert.Zero(t, e.fake.StrictRefusals())
}

// TestApprovalCloseWhilePending: closing the session cancels the pending
// approval (recorded after the session.close) and ends the held turn.
func TestApprovalCloseWhilePending(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"))
	_, st, id := d.holdCall()

	d.closeSession()
	_, term := readTurn(t, st)
	require.NotNil(t, term["error"], "the held turn ends with the session: %v", term)
	require.Eventually(t, func() bool {
		return e.srv.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil).Body["state"] == "cancelled"
	}, time.Minute, 50*time.Millisecond)
	evs := e.srv.Admin(t, http.MethodGet, "/admin/v1/sessions/"+d.sid+"/events?limit=200", nil)
	var items []map[string]any
	for _, it := range evs.Body["items"].([]any) {
		items = append(items, it.(map[string]any))
	}
	dec := ofType(items, "approval.decision")
	require.Len(t, dec, 1)
	assert.Equal(t, map[string]any{"approval_id": id, "decision": "cancelled", "decided_by": map[string]any{"kind": "close"}}, payload(dec[0]))
	assert.Empty(t, ofType(items, "mcp.request"))
	raw, _ := json.Marshal(types(items))
	assert.Less(t, strings.Index(string(raw), "session.close"), strings.Index(string(raw), "approval.decision"), string(raw))
}

// TestApprovalBAEClientSession: a client that knows only BAE (no
// Bae-Approvals header) sends a message whose call is held: its stream
// stays open and shows nothing new while the call waits, and completes
// once an operator approves through the admin API.
func TestApprovalBAEClientSession(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.stream(ctx, "file it")
	defer st.Close()
	require.Equal(t, http.StatusOK, st.Status())
	id := e.pendingApproval(d.sid)["id"].(string)
	assert.True(t, e.control(d.sid).Busy, "the held turn keeps the gate")

	ok := e.decideAdmin(id, map[string]any{"decision": "approve", "operator": "on-call"})
	require.Equal(t, http.StatusOK, ok.Status, string(ok.Raw))
	notes, term := readTurn(t, st)
	assert.Equal(t, "Filed.", firstText(message(term)))
	for _, n := range notes {
		assert.Equal(t, "session.event", n["method"], "nothing but BAE's notifications: %v", n)
	}
	assert.Equal(t, mcpTurnTypes[1:], testenv.EventTypes(notes))
	assert.Equal(t, mcpTurnTypes, types(resultEvents(term)))
	assert.Equal(t, "created acme/prod: Fix it", contentText(t, lastToolResult(t, e)["content"]))
}

// TestApprovalSurvivesKillsAndTemporalRestart: a held call's approval is
// granted after every replica was SIGKILLed, and again after the replicas
// and the Temporal server were stopped and started (its SQLite store
// kept): the wait is in the workflow's history, not in any process. The
// tool runs exactly once each time (counted by the MCP server itself).
func TestApprovalSurvivesKillsAndTemporalRestart(t *testing.T) {
	ks := newKillable(t)
	calls := filepath.Join(t.TempDir(), "calls")
	t.Setenv(fsCallsEnv, calls)
	fake := fakeprovider.New(t)
	lane := fake.Lane("primary")
	fake.Strict(true)
	lane.Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed once."), issueCall("acme/stage"), fakeprovider.Text("Filed twice."))

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	tdir := t.TempDir()
	port := freeLoopbackPort(t)
	startTemporal := func() *devstack.Server {
		dev, err := devstack.Start(ctx, devstack.Options{DataDir: tdir, FrontendPort: port, UIPort: -1, Namespace: "bae-kill",
			Logger: slog.New(slog.DiscardHandler), SearchAttributes: sessionclient.SearchAttributes})
		require.NoError(t, err)
		return dev
	}
	dev := startTemporal()
	t.Cleanup(func() { _ = dev.Stop() })
	cfg := fmt.Sprintf("\n[[providers.entries]]\nname = \"primary\"\nprovider = \"anthropic\"\nbase_url = %q\nmodel = \"claude-fake\"\nauth_token = \"literal-token\"\n", lane.URL()) +
		fsStdioTOML(t, "fs")
	replicas := []*procserver.Server{
		procserver.Start(t, procserver.Options{Bin: ks.bin, DatabaseURL: ks.db, Temporal: dev, DataDir: ks.dir, ConfigTOML: cfg}),
		procserver.Start(t, procserver.Options{Bin: ks.bin, DatabaseURL: ks.db, Temporal: dev, DataDir: ks.dir, ConfigTOML: cfg}),
	}
	a, b := replicas[0].API, replicas[1].API
	pid := a.Profile(t, map[string]any{"name": "held", "primary_provider": "primary", "allowed_tools": []string{}, "mcp_servers": []string{"fs"},
		"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp", "tool": "create_*"}}}})
	_, ck := a.Key(t, pid)
	sid, sk := a.Open(t, ck, map[string]any{"client_version": "test"})
	a.Call(t, sid, sk, "session.registerDriver", nil)
	e := &env{t: t, srv: a}

	ran := func() []string {
		raw, err := os.ReadFile(calls)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(raw)), "\n")
	}
	held := func(key, content string) string {
		st := sendKeyed(t, ctx, a, sid, sk, key, content, nil)
		id := e.pendingApproval(sid)["id"].(string)
		st.Close()
		return id
	}
	approveAndRelay := func(api *testenv.Server, id, key, content, want string) {
		r := api.Admin(t, http.MethodPost, "/admin/v1/approvals/"+id+"/decision", map[string]any{"decision": "approve", "operator": "on-call"})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		// The resend relays the turn the first request started.
		st := sendKeyed(t, ctx, api, sid, sk, key, content, nil)
		defer st.Close()
		term := terminalOf(st, 2*time.Minute)
		require.NotNil(t, term, "%s", replicas[1].Log())
		require.Nil(t, term["error"], "%v", term["error"])
		assert.Equal(t, want, firstText(message(term)))
	}

	// 1. Every replica SIGKILLed while the call is held.
	id := held("first", "file it")
	for _, r := range replicas {
		r.Kill()
	}
	for _, r := range replicas {
		r.Start()
	}
	assert.Equal(t, "pending", b.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil).Body["state"])
	assert.Empty(t, ran(), "nothing ran while held")
	approveAndRelay(b, id, "first", "file it", "Filed once.")
	assert.Equal(t, []string{"created acme/prod: Fix it"}, ran())

	// 2. The replicas and the Temporal server stopped and started again.
	id = held("second", "again")
	for _, r := range replicas {
		r.Kill()
	}
	require.NoError(t, dev.Stop())
	dev = startTemporal()
	for _, r := range replicas {
		r.Start()
	}
	assert.Equal(t, "pending", a.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil).Body["state"])
	approveAndRelay(a, id, "second", "again", "Filed twice.")
	assert.Equal(t, []string{"created acme/prod: Fix it", "created acme/stage: Fix it"}, ran(), "each approved call ran exactly once")
	evs := eventsOf(t, a, sid, sk)
	assert.Len(t, ofType(evs, "mcp.request"), 2)
	assert.Len(t, ofType(evs, "approval.decision"), 2)
	assert.Zero(t, fake.StrictRefusals())
}

// freeLoopbackPort is a port nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestApprovalIdleSweepKeepsSessionOpen: however long a call is held, the
// idle sweep does not close its session (the held turn has no recorded
// result, and the approval is pending); the approval still decides it.
func TestApprovalIdleSweepKeepsSessionOpen(t *testing.T) {
	logs := &testlog.Buffer{}
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs"), logs: logs,
		serverEnv: map[string]string{"BAE_SESSION_IDLE_TTL": idleTTL.String()}})
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp"}}}})
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."))
	_, st, id := d.holdCall()

	sweptPastTTL(t, e, logs, d.sid)
	assert.Equal(t, "open", sessionState(t, e, d.sid))
	require.Equal(t, http.StatusOK, e.decideAdmin(id, map[string]any{"decision": "approve"}).Status)
	_, term := readTurn(t, st)
	assert.Equal(t, "Filed.", firstText(message(term)))
}

// TestApprovalHoldsSandboxExec: a sandbox_exec rule holds a declared
// sandbox tool's command by its argument, through the same path as MCP
// tools: edited arguments must fit the driver's declared input schema, and
// the command that reaches the sandbox step is the approved one. (No
// sandbox is started: the step answers its "no remote sandbox" error
// result, which is enough to see what it was asked to run.)
func TestApprovalHoldsSandboxExec(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}})
	e.fake.Strict(true)
	pid := e.profile(map[string]any{"approvals": map[string]any{"rules": []any{
		map[string]any{"kind": "sandbox_exec", "tool": "run_shell_*", "args_match": map[string]any{"command": "rm *"}, "deciders": "operators"},
	}}})
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
	d.register()
	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.ToolUse("tu_1", "run_shell_command", map[string]any{"command": "ls"}), fakeprovider.Text("listed"),
		fakeprovider.ToolUse("tu_2", "run_shell_command", map[string]any{"command": "rm -rf build"}), fakeprovider.Text("handled"))

	// A command the rule does not match runs at once.
	_, term := d.send("list")
	assert.NotContains(t, types(resultEvents(term)), "approval.request")
	assert.Len(t, ofType(d.allEvents(), "sandbox.request"), 1)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.streamOptedIn(ctx, "clean up")
	defer st.Close()
	seen := until(t, st, isMethod("session.approvalRequest"))
	note := seen[len(seen)-1]["params"].(map[string]any)
	id := note["approval_id"].(string)
	assert.Equal(t, map[string]any{"id": "tu_2", "kind": "sandbox", "name": "run_shell_command", "arguments": map[string]any{"command": "rm -rf build"}}, note["tool_call"])
	assert.Equal(t, "operators", note["deciders"])

	bad := e.decideAdmin(id, map[string]any{"decision": "approve", "arguments": map[string]any{"cmd": "ls"}})
	assert.Equal(t, http.StatusUnprocessableEntity, bad.Status, "the declared schema requires command: %s", bad.Raw)
	require.Equal(t, http.StatusOK, e.decideAdmin(id, map[string]any{"decision": "approve", "arguments": map[string]any{"command": "rm -rf build/tmp"}}).Status)
	_, term = readTurn(t, st)
	assert.Equal(t, "handled", firstText(message(term)))
	reqs := ofType(d.allEvents(), "sandbox.request")
	require.Len(t, reqs, 2)
	assert.Equal(t, "rm -rf build/tmp", payload(reqs[1])["command"], "the approved command")
	assert.Zero(t, e.fake.StrictRefusals())
}

// TestApprovalLaterCallDeadline: of two held calls in one model response,
// the second's deadline runs from its request: it expires while the first
// still waits for a person (recorded, and its error result stored), and
// when the first is approved the model gets both results.
func TestApprovalLaterCallDeadline(t *testing.T) {
	e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
	e.fake.Strict(true)
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{
		map[string]any{"kind": "mcp", "server": "fs", "tool": "create_*", "args_match": map[string]any{"repo": "acme/prod"}, "timeout": "1h"},
		map[string]any{"kind": "mcp", "server": "fs", "tool": "create_*", "timeout": "2s", "on_timeout": "reject"},
	}}})
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(
		fakeprovider.ToolUse("tu_1", "create_issue", map[string]any{"repo": "acme/prod", "title": "Fix it"}).
			WithToolUse("tu_2", "create_issue", map[string]any{"repo": "acme/dev", "title": "Fix it"}),
		fakeprovider.Text("One filed."))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.stream(ctx, "file both")
	defer st.Close()

	byCall := map[string]string{} // tool_call id → approval id
	require.Eventually(t, func() bool {
		for _, ev := range ofType(d.allEvents(), "approval.request") {
			byCall[payload(ev)["tool_call_id"].(string)] = payload(ev)["approval_id"].(string)
		}
		return len(byCall) == 2
	}, time.Minute, 50*time.Millisecond)
	state := func(id string) any {
		return e.srv.Admin(t, http.MethodGet, "/admin/v1/approvals/"+id, nil).Body["state"]
	}
	// The first call is still held: the second expires at its own deadline.
	require.Eventually(t, func() bool { return state(byCall["tu_2"]) == "expired" }, 30*time.Second, 100*time.Millisecond,
		"the later call's deadline passes while the turn waits on the first")
	assert.Equal(t, "pending", state(byCall["tu_1"]))
	dec := ofType(d.allEvents(), "approval.decision")
	require.Len(t, dec, 1)
	assert.Equal(t, map[string]any{"approval_id": byCall["tu_2"], "decision": "expired", "decided_by": map[string]any{"kind": "deadline"}}, payload(dec[0]))

	require.Equal(t, http.StatusOK, e.decideAdmin(byCall["tu_1"], map[string]any{"decision": "approve"}).Status)
	_, term := readTurn(t, st)
	assert.Equal(t, "One filed.", firstText(message(term)))
	evs := d.allEvents()
	require.Len(t, ofType(evs, "mcp.request"), 1, "only the approved call ran")
	assert.Equal(t, "acme/prod", payload(ofType(evs, "mcp.request")[0])["input"].(map[string]any)["repo"])
	reqs := e.fake.Requests()
	msgs := reqs[len(reqs)-1].Messages()
	results := map[string]map[string]any{}
	for _, b := range msgs[len(msgs)-1]["content"].([]any) {
		block := b.(map[string]any)
		results[block["tool_use_id"].(string)] = block
	}
	require.Len(t, results, 2)
	assert.Equal(t, "created acme/prod: Fix it", contentText(t, results["tu_1"]["content"]))
	assert.Equal(t, true, results["tu_2"]["is_error"])
	assert.Equal(t, events.ExpiredRejection, contentText(t, results["tu_2"]["content"]))
	assert.Zero(t, e.fake.StrictRefusals())
}

// TestApprovalNotesOnSubscribeReplay: an opted-in session.subscribe that
// replays with since_event_id carries session.approvalRequest for an
// approval still pending, right after its event, and nothing for one
// decided before (its events only); the live part then carries the
// decision's notification.
func TestApprovalNotesOnSubscribeReplay(t *testing.T) {
	e, pid := approvalEnv(t, nil)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Understood."), issueCall("acme/prod"), fakeprovider.Text("Filed."))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := d.stream(ctx, "file it")
	decided := e.pendingApproval(d.sid)["id"].(string)
	require.Equal(t, http.StatusOK, e.decideAdmin(decided, map[string]any{"decision": "reject"}).Status)
	readTurn(t, first)
	first.Close()
	st := d.stream(ctx, "file it again")
	defer st.Close()
	pending := e.pendingApproval(d.sid)["id"].(string)

	since := d.allEvents()[0]["id"]
	obs := e.srv.RPCStreamHeader(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 7, "method": "session.subscribe",
		"params": map[string]any{"since_event_id": since}}, approvalsOn)
	defer obs.Close()
	isRequestOf := func(id string) func(map[string]any) bool {
		return func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			return m["method"] == "session.event" && p["event_type"] == "approval.request" && payload(p)["approval_id"] == id
		}
	}
	// A BAE client replaying the same log sees no approval event at all.
	bae := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 8, "method": "session.subscribe",
		"params": map[string]any{"since_event_id": since}})
	defer bae.Close()
	replayed := until(t, obs, isRequestOf(pending))
	for _, m := range replayed {
		assert.NotContains(t, []any{"session.approvalRequest", "session.approvalDecision"}, m["method"], "nothing for the approval decided before: %v", m)
	}
	assert.Contains(t, testenv.EventTypes(replayed), "approval.decision", "the decided approval's events are replayed")
	// Decide now: the note of the pending request must come before the
	// decision's event.
	require.Equal(t, http.StatusOK, e.decideAdmin(pending, map[string]any{"decision": "approve"}).Status)
	next := obs.Next(time.Minute)
	require.NotNil(t, next)
	require.Equal(t, "session.approvalRequest", next["method"], "the replayed pending request's notification follows its event: %v", next)
	note := next["params"].(map[string]any)
	assert.Equal(t, pending, note["approval_id"])
	assert.Equal(t, "create_issue", note["tool_call"].(map[string]any)["name"])
	until(t, obs, isMethod("session.approvalDecision"))
	readTurn(t, st)
	plain := until(t, bae, func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return p["event_type"] == "server.message.send" && len(ofType(d.allEvents(), "server.message.send")) == 2 && p["payload"] != nil &&
			strings.Contains(fmt.Sprint(p["payload"]), "Filed.")
	})
	for _, m := range plain {
		assert.Equal(t, "session.event", m["method"], "BAE's notifications only: %v", m)
	}
	assert.NotContains(t, testenv.EventTypes(plain), "approval.request", "a BAE replay carries nothing of approvals")
	assert.NotContains(t, testenv.EventTypes(plain), "approval.decision")
}

// TestApprovalHoldsSubagentLaunch: a subagent rule holds a launch of a
// declared subagent tool: no subagent starts while it waits; approved, it
// launches; rejected, it never does and the model gets the error result.
func TestApprovalHoldsSubagentLaunch(t *testing.T) {
	image := busyboxImage(t)
	e := newEnv(t, envOpts{})
	e.fake.Strict(true)
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{},
		"available_sandboxes": []string{image}, "approvals": map[string]any{"rules": []any{map[string]any{"kind": "subagent", "tool": "launch_*"}}}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	keyID, key := e.srv.Key(t, e.pid)
	sid, sk := e.srv.Open(t, key, map[string]any{"subagent_tools": []any{subagentDecl(image)}})
	d := &driver{e: e, keyID: keyID, key: key, sid: sid, sk: sk}
	d.register()
	require.NotNil(t, testenv.Terminal(t, e.srv.Call(t, sid, sk, "session.startRemoteSandbox", map[string]any{"image": image}))["result"])
	launch := func(id string) fakeprovider.Reply {
		return fakeprovider.ToolUse(id, "launch_subagent", map[string]any{"harness": "echo", "model": "m1", "prompt": "hello sub"})
	}
	e.fake.Lane("primary").Enqueue(launch("tu_a"), fakeprovider.Text("launched"), launch("tu_r"), fakeprovider.Text("not launched"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	st := d.stream(ctx, "delegate it")
	item := e.pendingApproval(sid)
	assert.Equal(t, "subagent", item["tool_call"].(map[string]any)["kind"])
	assert.Empty(t, ofType(d.allEvents(), "session.subagent.start"), "nothing launches while the call is held")
	require.Equal(t, http.StatusOK, e.decideAdmin(item["id"].(string), map[string]any{"decision": "approve"}).Status)
	_, term := readTurn(t, st)
	st.Close()
	assert.Equal(t, "launched", firstText(message(term)))
	assert.Len(t, ofType(d.allEvents(), "session.subagent.start"), 1, "approved: it launched")

	st = d.stream(ctx, "another")
	defer st.Close()
	item = e.pendingApproval(sid)
	require.Equal(t, http.StatusOK, e.decideAdmin(item["id"].(string), map[string]any{"decision": "reject", "message": "not now"}).Status)
	_, term = readTurn(t, st)
	assert.Equal(t, "not launched", firstText(message(term)))
	assert.Len(t, ofType(d.allEvents(), "session.subagent.start"), 1, "rejected: no second launch")
	tr := lastToolResult(t, e)
	assert.Equal(t, true, tr["is_error"])
	assert.Contains(t, contentText(t, tr["content"]), "not now")
	assert.Zero(t, e.fake.StrictRefusals())
}
