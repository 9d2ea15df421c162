package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// TestRecordedHistoryReplays runs one real session per behaviour of the
// Session workflow and replays each history against the current code: any
// nondeterminism fails here. With BAE_RECORD_HISTORY=1 it writes them to
// workflows/testdata, which the fast replay test in package workflows
// checks on every run, so later changes are held to today's histories.
func TestRecordedHistoryReplays(t *testing.T) {
	t.Run("session_history", func(t *testing.T) {
		// A client tool pause and resume, a fallback, an abandoned pause, a close.
		e := newEnv(t, envOpts{fallbacks: []string{"fallback"}})
		d := e.open("get_time")
		e.fake.Lane("primary").Enqueue(
			fakeprovider.ToolUse("tu_1", "get_time", nil).WithToolUse("tu_2", "unrouted", nil),
			fakeprovider.Error(500, "down"),
			fakeprovider.ToolUse("tu_3", "get_time", nil),
		)
		d.send("what time?")
		d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"}})
		d.send("and now?")
		d.send("forget it")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "session_history")
	})
	t.Run("rewind", func(t *testing.T) {
		// A Rewind update that interrupts a paused turn first, then
		// rewinds it and the turn before; a turn after it; a close.
		e := newEnv(t, envOpts{})
		d := e.open("get_time")
		d.send("one")
		d.send("two")
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil))
		d.send("what time?")
		turns := turnIDs(t, e, d.sid)
		res := d.rewindOf(map[string]any{"turn_id": turns[1]})
		require.Equal(t, turns[2], res["interrupted_turn_id"])
		d.send("again")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "rewind")
	})
	t.Run("begin_in_attempt", func(t *testing.T) {
		// BeginTurn inside the first provider attempt (versionBeginInAttempt):
		// a text turn, a failed primary (its begin read back) answered by
		// the fallback, and a client tool pause resumed. The same scenario
		// recorded local_provider.json before that version (provider
		// attempts as local activities, BeginTurn on its own); that file
		// stays as it was recorded.
		e := newEnv(t, envOpts{fallbacks: []string{"fallback"}})
		d := e.open("get_time")
		d.send("hello")
		e.fake.Lane("primary").Enqueue(fakeprovider.Error(500, "down"), fakeprovider.ToolUse("tu_1", "get_time", nil))
		d.send("fall back")
		d.send("what time?")
		d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"}})
		d.closeSession()
		recordAndReplay(t, e, d.sid, "begin_in_attempt")
	})
	t.Run("compaction", func(t *testing.T) {
		// versionCompaction: turns whose view needs a summary run
		// CompactContext and retry their attempt; a too-long refusal
		// compacts harder; a turn that fits no window fails alone.
		e, lane, pid := newCompactionEnv(t, "anthropic", windowTokens/2, map[string]any{})
		d := e.openOn(pid, nil)
		d.register()
		for i := range 24 {
			d.send(userText(i))
		}
		d.send(strings.Repeat("too big ", 10_000))
		d.send("and now?")
		require.Positive(t, lane.Refusals())
		d.closeSession()
		recordAndReplay(t, e, d.sid, "compaction")
	})
	t.Run("approvals", func(t *testing.T) {
		// versionApprovals: held server-side calls wait in the workflow for
		// the DecideApproval update (approved with edits, rejected), for
		// their deadline's timer, or until an interrupt or the close ends
		// them.
		e, pid := approvalEnv(t, map[string]any{"timeout": "1h"})
		d := e.openDriver(pid)
		e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."), issueCall("acme/prod"), fakeprovider.Text("Not filed."),
			issueCall("acme/prod"), fakeprovider.Text("Timed out."), issueCall("acme/prod"), fakeprovider.Text("After."), issueCall("acme/prod"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		held := func(content string) (*testenv.Stream, string) {
			st := d.stream(ctx, content)
			return st, e.pendingApproval(d.sid)["id"].(string)
		}
		st, id := held("approve, edited")
		require.Equal(t, http.StatusOK, e.decideAdmin(id, map[string]any{"decision": "approve", "arguments": map[string]any{"repo": "acme/staging", "title": "t"}}).Status)
		readTurn(t, st)
		st, id = held("reject")
		result(t, d.decide(map[string]any{"approval_id": id, "decision": "reject", "message": "no"}))
		readTurn(t, st)
		r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "replay-approvals", "primary_provider": "primary", "mcp_servers": []string{"fs"},
			"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp", "timeout": "1s"}}}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		d.send("deadline")
		r = e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+pid, map[string]any{"name": "replay-approvals", "primary_provider": "primary", "mcp_servers": []string{"fs"},
			"approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp"}}}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		st, _ = held("interrupt")
		result(t, d.call("session.interrupt", map[string]any{}))
		readTurn(t, st)
		d.send("after")
		st, _ = held("close")
		d.closeSession()
		readTurn(t, st)
		recordAndReplay(t, e, d.sid, "approvals")
	})
	t.Run("approval_deadlines", func(t *testing.T) {
		// versionApprovalDeadlines: each held call's deadline is its own
		// timer from its request: of two calls in one response, the second
		// expires while the first waits, then the first is approved.
		e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
		pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{
			map[string]any{"kind": "mcp", "args_match": map[string]any{"repo": "acme/prod"}, "timeout": "1h"},
			map[string]any{"kind": "mcp", "timeout": "1s"},
		}}})
		d := e.openDriver(pid)
		e.fake.Lane("primary").Enqueue(
			fakeprovider.ToolUse("tu_1", "create_issue", map[string]any{"repo": "acme/prod", "title": "t"}).
				WithToolUse("tu_2", "create_issue", map[string]any{"repo": "acme/dev", "title": "t"}),
			fakeprovider.Text("One filed."))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		st := d.stream(ctx, "file both")
		defer st.Close()
		require.Eventually(t, func() bool { return len(ofType(d.allEvents(), "approval.decision")) == 1 }, time.Minute, 50*time.Millisecond)
		id := e.pendingApproval(d.sid)["id"].(string)
		require.Equal(t, http.StatusOK, e.decideAdmin(id, map[string]any{"decision": "approve"}).Status)
		readTurn(t, st)
		d.closeSession()
		recordAndReplay(t, e, d.sid, "approval_deadlines")
	})
	t.Run("budgets", func(t *testing.T) {
		// versionBudgets: attempts read the budgets first; a looping turn
		// is stopped by the session's spent budget (FailTurn, step
		// budget), and after the budget is raised the session goes on.
		e := newEnv(t, envOpts{})
		d := e.open()
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("", "unroutable_tool", nil), fakeprovider.Text("done"))
		r := e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/session/"+d.sid, map[string]any{"unit": "tokens", "limit": 1})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		_, term := d.send("loop")
		require.NotNil(t, term["error"])
		r = e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/session/"+d.sid, map[string]any{"unit": "tokens", "limit": 1_000_000})
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		_, term = d.send("go on")
		require.Nil(t, term["error"], "%v", term["error"])
		d.closeSession()
		recordAndReplay(t, e, d.sid, "budgets")
	})
	t.Run("continue_as_new", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		e.srv.Parts.Engine.TurnsPerRun = 2
		d := e.open()
		for i := 0; i < 3; i++ {
			e.fake.Lane("primary").Enqueue(fakeprovider.Text("ok"))
			d.send("again")
		}
		// The first run ended by continuing as new: that is the history kept.
		recordRun(t, e, d.sid, "continue_as_new", firstRunID(t, e, d.sid))
		d.closeSession()
	})
	t.Run("signal_queue", func(t *testing.T) {
		// Messages sent while a turn runs wait in the workflow's queue as
		// Enqueue signals (versionSignalQueue), each turn records its
		// result, and the run that reaches its turn limit with a message
		// still waiting carries it into the next run.
		e := newEnv(t, envOpts{})
		e.srv.Parts.Engine.TurnsPerRun = 2
		d := e.open()
		// The first answer takes long enough for the other two messages to
		// be queued behind it (the workflow answers no query while a
		// provider call holds its task, so this is not observed).
		e.fake.Lane("primary").Enqueue(fakeprovider.Text("first").After(3 * time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		first := d.stream(ctx, "one")
		<-e.fake.Started()
		second, third := d.stream(ctx, "two"), d.stream(ctx, "three")
		for _, st := range []*testenv.Stream{first, second, third} {
			var last map[string]any
			for m := range st.Lines() {
				last = m
			}
			st.Close()
			require.NotNil(t, last["result"], "%v", last)
		}
		recordRun(t, e, d.sid, "signal_queue", firstRunID(t, e, d.sid))
		d.closeSession()
	})
	t.Run("providers_failed", func(t *testing.T) {
		e := newEnv(t, envOpts{fallbacks: []string{"fallback"}})
		d := e.open()
		e.fake.Lane("primary").Enqueue(fakeprovider.Error(500, "down"))
		e.fake.Lane("fallback").Enqueue(fakeprovider.Error(503, "also down"))
		d.send("hello?")
		recordAndReplay(t, e, d.sid, "providers_failed")
	})
	t.Run("turn_step", func(t *testing.T) {
		// versionTurnStep: each step upserts the memo's current_step: a
		// text turn, a failed primary and the fallback's answer, an MCP
		// tool call, a client tool pause and its resume, a close. Recorded
		// before versionTurnStepLazy; run today, its steps stay out of the
		// memo (turn_step_lazy).
		e := newEnv(t, envOpts{fallbacks: []string{"fallback"}, allowedTools: []string{"get_time"}, extraTOML: fsStdioTOML(t, "fs")})
		pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "fallback_providers": []string{"fallback"}, "allowed_tools": []string{"get_time"}})
		d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
		d.register()
		d.send("hello")
		e.fake.Lane("primary").Enqueue(fakeprovider.Error(500, "down"))
		d.send("fall back")
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("Two files."))
		d.send("which files?")
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_2", "get_time", nil))
		d.send("what time?")
		d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_2", "content": "noon"}})
		d.closeSession()
		recordAndReplay(t, e, d.sid, "turn_step")
	})
	t.Run("turn_step_lazy", func(t *testing.T) {
		// versionTurnStepLazy: a text turn and an MCP tool turn, each
		// ending inside its workflow tasks, upsert no step; a provider call
		// that outlasts its task's heartbeat is in the memo while it runs,
		// and its turn's end removes it; a close.
		e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
		pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
		d := e.openOn(pid, nil)
		d.register()
		d.send("hello")
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("Two files."))
		d.send("which files?")
		require.Empty(t, stepUpserts(t, e, d.sid), "turns that end within their workflow tasks upsert no step")

		e.fake.Lane("primary").Enqueue(fakeprovider.Text("At last.").UntilReleased())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		st := d.stream(ctx, "take your time")
		defer st.Close()
		began := startedWith(t, e.fake, "take your time").Received
		var shown string
		require.Eventually(t, func() bool {
			shown = memoStep(t, e, d.sid)
			return shown != ""
		}, time.Minute, 100*time.Millisecond, "the held call's step reaches the memo while it runs")
		t.Logf("the step reached the memo %s into the provider call: %s", time.Since(began).Round(100*time.Millisecond), shown)
		require.Contains(t, shown, "provider call to primary")
		e.fake.Release()
		readTurn(t, st)
		require.Eventually(t, func() bool { return memoStep(t, e, d.sid) == "" }, time.Minute, 100*time.Millisecond, "the turn's end removes its step")
		require.Len(t, stepUpserts(t, e, d.sid), 2, "the held call's step, then its removal")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "turn_step_lazy")
	})
	t.Run("mcp_tool", func(t *testing.T) {
		e := newEnv(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")})
		pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
		d := e.openOn(pid, nil)
		d.register()
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("Two files."))
		d.send("which files?")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "mcp_tool")
	})
	t.Run("sandbox_exec", func(t *testing.T) {
		image := buildImages(t, 1)[0]
		e := newEnv(t, envOpts{})
		pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
		e.waitProvisioned(pid, image)
		d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
		d.reapOnCleanup()
		d.register()
		result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))
		e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "run_shell_command", map[string]any{"command": "echo hi"}), fakeprovider.Text("done"))
		d.send("run it")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "sandbox_exec")
	})
	t.Run("subagent_launch", func(t *testing.T) {
		image := busyboxImage(t)
		e := newEnv(t, envOpts{})
		pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
		e.waitProvisioned(pid, image)
		d := e.openOn(pid, map[string]any{"subagent_tools": []any{subagentDecl(image)}})
		d.reapOnCleanup()
		d.register()
		result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))
		e.fake.Lane("primary").Enqueue(
			fakeprovider.ToolUse("tu_l", "launch_subagent", map[string]any{"harness": "echo", "model": "m1", "prompt": "hello sub"}),
			fakeprovider.Text("launched"),
			fakeprovider.ToolUse("tu_s", "remote_subagent_status", map[string]any{}),
			fakeprovider.Text("got it"),
		)
		d.send("delegate it")
		requireSubagentDone(t, e, d)
		d.send("how did it go?")
		d.closeSession()
		recordAndReplay(t, e, d.sid, "subagent_launch")
	})
}

// requireSubagentDone waits until the session's subagent logged its end.
func requireSubagentDone(t *testing.T, e *env, d *driver) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(ofType(d.allEvents(), "session.subagent.completed")) > 0
	}, time.Minute, 100*time.Millisecond)
}

func recordAndReplay(t *testing.T, e *env, sid, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, e.srv.Temporal.GetWorkflow(ctx, sid, "").Get(ctx, nil), "the workflow completes")
	recordRun(t, e, sid, name, "")
}

// firstRunID is the run before the session's current one: the run that
// continued as new.
func firstRunID(t *testing.T, e *env, sid string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := e.srv.Temporal.GetWorkflowHistory(ctx, sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	require.True(t, it.HasNext())
	first, err := it.Next()
	require.NoError(t, err)
	prev := first.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	require.NotEmpty(t, prev, "the current run continued an earlier one")
	return prev
}

func recordRun(t *testing.T, e *env, sid, name, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hist := &historypb.History{}
	it := e.srv.Temporal.GetWorkflowHistory(ctx, sid, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		hist.Events = append(hist.Events, ev)
	}
	require.NotEmpty(t, hist.Events)

	replayer := worker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	require.NoError(t, replayer.ReplayWorkflowHistory(nil, hist))

	if os.Getenv("BAE_RECORD_HISTORY") != "" {
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", name+".json"), b, 0o644))
	}
}

// startedWith waits for the provider request whose body holds text.
func startedWith(t *testing.T, fake *fakeprovider.Server, text string) fakeprovider.Recorded {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case rec := <-fake.Started():
			if strings.Contains(string(rec.RawBody), text) {
				return rec
			}
		case <-timeout:
			t.Fatalf("no provider request with %q", text)
		}
	}
}

// memoStep is the session workflow's memo current_step ("" when absent).
func memoStep(t *testing.T, e *env, sid string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, sid, "")
	require.NoError(t, err)
	p := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoCurrentStep]
	if p == nil {
		return ""
	}
	var step string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &step))
	return step
}

// stepUpserts are the session's history events that set or remove the
// memo's current_step.
func stepUpserts(t *testing.T, e *env, sid string) []*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*historypb.HistoryEvent
	it := e.srv.Temporal.GetWorkflowHistory(ctx, sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if _, ok := ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields()[workflows.MemoCurrentStep]; ok {
			out = append(out, ev)
		}
	}
	return out
}
