package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
	"github.com/bae-go/bae-go/workflows"
)

// The client's W3C trace, as a BAE SDK would send it.
const (
	clientTrace = "5b8aa5a2d2c872e8321cf37308d69df2"
	clientSpan  = "051581bf3cb55c13"
)

// tracedSend is d.send with a traceparent header.
func (d *driver) tracedSend(content any, traceparent string) map[string]any {
	d.e.t.Helper()
	t := d.e.t
	body, err := json.Marshal(d.request(content))
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, d.e.srv.ClientURL+"/api/v1/sessions/"+d.sid+"/rpc", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+d.sk)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var objs []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		objs = append(objs, m)
	}
	require.NoError(t, sc.Err())
	return testenv.Terminal(t, objs)
}

// TestTelemetryContract drives turns of every kind against a real OTLP/gRPC
// receiver and checks BAE's span contract end to end: names, kinds,
// attributes, parents, links and status, joined to the client's trace;
// the failed turn as Temporal shows it; and the Prometheus endpoint.
func TestTelemetryContract(t *testing.T) {
	rcv := startOTLPReceiver(t)
	tel := otlpTelemetry(t, rcv, nil)
	e := newEnv(t, envOpts{
		fallbacks: []string{"fallback"}, allowedTools: []string{"get_time"},
		extraTOML: fsStdioTOML(t, "fs"),
		telemetry: tel, serverEnv: map[string]string{"BAE_METRICS_ADDR": "admin"},
	})
	primary, fallback := e.fake.Lane("primary"), e.fake.Lane("fallback")
	const secretText = "message-body-marker-7f3a"

	// S1: text, fallback, a client tool pause and its resume, then close.
	d := e.open("get_time")
	primary.Enqueue(fakeprovider.Text("hello"))
	term := d.tracedSend("hi "+secretText, "00-"+clientTrace+"-"+clientSpan+"-01")
	require.Nil(t, term["error"], "%v", term)
	primary.Enqueue(fakeprovider.Error(500, "overloaded"))
	fallback.Enqueue(fakeprovider.Text("from the fallback"))
	_, term = d.send("again")
	require.Equal(t, "from the fallback", firstText(message(term)))
	primary.Enqueue(fakeprovider.ToolUse("tu_c", "get_time", map[string]any{"zone": "UTC"}))
	d.send("what time is it?")
	primary.Enqueue(fakeprovider.Text("noon it is"))
	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_c", "content": "12:00"}})
	require.Equal(t, "noon it is", firstText(message(term)))
	d.closeSession()

	// S2: an MCP tool.
	mcpProfile := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
	m := e.openOn(mcpProfile, nil)
	m.register()
	primary.Enqueue(fakeprovider.ToolUse("tu_m", "list_files", map[string]any{"path": "/data"}), fakeprovider.Text("two files"))
	m.send("list")
	m.closeSession()

	// S2b: an MCP call held for approval, rejected by an operator.
	heldProfile := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{map[string]any{"kind": "mcp"}}}})
	h := e.openOn(heldProfile, nil)
	h.register()
	primary.Enqueue(fakeprovider.ToolUse("tu_h", "create_issue", map[string]any{"repo": "r", "title": "t"}), fakeprovider.Text("not filed"))
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	hs := h.stream(hctx, "file it")
	hid := e.pendingApproval(h.sid)["id"].(string)
	require.Equal(t, http.StatusOK, e.decideAdmin(hid, map[string]any{"decision": "reject", "message": "no"}).Status)
	readTurn(t, hs)
	hs.Close()
	hcancel()
	h.closeSession()

	// S3: every provider fails; the session ends in error.
	f := e.open()
	primary.Enqueue(fakeprovider.Error(503, "down"))
	fallback.Enqueue(fakeprovider.Error(502, "also down"))
	_, term = f.send("anyone there?")
	assert.Equal(t, "The provider is currently unavailable.", firstText(message(term)))

	// /healthz is never spanned, even with a traceparent.
	req, err := http.NewRequest(http.MethodGet, e.srv.ClientURL+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	// Wait for every span checked below. A turn's answer reaches its client
	// before the turn's span ends, and a turn that ends its session is
	// recorded (and its span emitted) after the session's cleanup emitted
	// bae.session: no one span is reliably the last to end.
	rcv.flushUntil(t, tel, named(telemetry.SpanSession, telemetry.AttrSessionID, f.sid), "the failed session's span")
	rcv.flushUntil(t, tel, named(telemetry.SpanTurn, telemetry.AttrSessionID, f.sid), "the failed turn's span")
	rcv.flushUntil(t, tel, named(telemetry.SpanSession, telemetry.AttrSessionID, d.sid), "the first session's span")
	rcv.flushUntilN(t, tel, named(telemetry.SpanTurn, telemetry.AttrSessionID, d.sid), 4, "the first session's turn spans")
	rcv.flushUntil(t, tel, named(telemetry.SpanTurn, telemetry.AttrSessionID, m.sid), "the MCP turn's span")
	rcv.flushUntil(t, tel, named(telemetry.SpanTurn, telemetry.AttrSessionID, h.sid), "the held turn's span")
	for _, s := range rcv.find(func(gotSpan) bool { return true }) {
		if strings.HasPrefix(s.Name, "bae.") || strings.Contains(s.Name, " /") || s.Name == "POST" || s.Name == "GET" {
			assert.Equal(t, telemetry.ScopeName, s.scope, "%s", s.Name)
		}
		assert.NotEqual(t, "GET /healthz", s.Name)
	}

	rpcSpan := func(sid, method string) func(gotSpan) bool {
		return named("POST /api/v1/sessions/{id}/rpc", "rpc.method", method, telemetry.AttrSessionID, sid)
	}
	sessionOf := func(sid string) gotSpan {
		return rcv.one(t, "bae.session of "+sid, named(telemetry.SpanSession, telemetry.AttrSessionID, sid))
	}
	turnsOf := func(sid string) []gotSpan {
		return rcv.find(named(telemetry.SpanTurn, telemetry.AttrSessionID, sid))
	}
	childrenOf := func(p gotSpan, name string) []gotSpan {
		return rcv.find(func(s gotSpan) bool { return s.Name == name && s.childOf(p) })
	}

	t.Run("approval wait", func(t *testing.T) {
		waits := rcv.find(named(telemetry.SpanApprovalWait, telemetry.AttrApprovalDecision, "rejected"))
		require.Len(t, waits, 1)
		turns := turnsOf(h.sid)
		require.Len(t, turns, 1)
		assert.True(t, waits[0].childOf(turns[0]), "the wait is a span of its turn")
	})

	t.Run("session", func(t *testing.T) {
		s := sessionOf(d.sid)
		assert.Equal(t, tracepb.Span_SPAN_KIND_INTERNAL, s.Kind)
		assert.Equal(t, e.pid, s.attr(telemetry.AttrProfileID))
		assert.Equal(t, d.keyID, s.attr(telemetry.AttrClientKeyID))
		assert.False(t, s.failed(), "closed normally")
		create := rcv.find(func(h gotSpan) bool { return h.Name == "POST /api/v1/sessions" && s.childOf(h) })
		require.Len(t, create, 1, "bae.session is a child of the request that opened it")
		assert.Equal(t, "201", create[0].attr(telemetry.AttrHTTPStatus))
		assert.Equal(t, "POST", create[0].attr(telemetry.AttrHTTPMethod))
		assert.Equal(t, "/api/v1/sessions", create[0].attr(telemetry.AttrHTTPRoute))
		assert.Equal(t, "/api/v1/sessions", create[0].attr(telemetry.AttrURLPath))
		assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, create[0].Kind)
		reg := rcv.one(t, "registerDriver request", rpcSpan(d.sid, "session.registerDriver"))
		assert.True(t, reg.linked(s, telemetry.LinkSession), "registerDriver links to the session")
		assert.False(t, reg.childOf(s))
	})

	turns := turnsOf(d.sid)
	require.Len(t, turns, 4, rcv.names())
	session := sessionOf(d.sid)
	for _, tr := range turns {
		assert.True(t, tr.linked(session, telemetry.LinkSession), "every turn links to its session")
		assert.Equal(t, d.keyID, tr.attr(telemetry.AttrClientKeyID))
		assert.Equal(t, tracepb.Span_SPAN_KIND_INTERNAL, tr.Kind)
		assert.Equal(t, telemetry.ScopeName, tr.scope)
	}

	t.Run("text turn joins the client's trace", func(t *testing.T) {
		req := rcv.one(t, "the traced request", func(s gotSpan) bool {
			return s.trace() == clientTrace && s.parent() == clientSpan
		})
		assert.Equal(t, "POST /api/v1/sessions/{id}/rpc", req.Name)
		assert.Equal(t, "/api/v1/sessions/"+d.sid+"/rpc", req.attr(telemetry.AttrURLPath))
		turn := rcv.one(t, "the traced turn", func(s gotSpan) bool { return s.Name == telemetry.SpanTurn && s.childOf(req) })
		assert.Equal(t, workflows.OutcomeCompleted, turn.attr(telemetry.AttrTurnOutcome))
		assert.Equal(t, "false", turn.attr(telemetry.AttrTurnResumed))
		assert.False(t, turn.failed())
		attempts := childrenOf(turn, telemetry.SpanProviderAttempt)
		require.Len(t, attempts, 1)
		a := attempts[0]
		assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, a.Kind)
		assert.Equal(t, "primary", a.attr(telemetry.AttrProviderName))
		assert.Equal(t, "anthropic", a.attr(telemetry.AttrProviderKind))
		assert.Equal(t, "claude-fake", a.attr(telemetry.AttrProviderModel))
		assert.Equal(t, "0", a.attr(telemetry.AttrProviderAttempt))
		assert.Equal(t, "primary", a.attr(telemetry.AttrProviderAttemptKind))
		assert.Equal(t, "200", a.attr(telemetry.AttrHTTPStatus))
		assert.False(t, a.failed())
		assert.LessOrEqual(t, turn.StartTimeUnixNano, a.StartTimeUnixNano)
		assert.GreaterOrEqual(t, turn.EndTimeUnixNano, a.EndTimeUnixNano)
	})

	t.Run("fallback", func(t *testing.T) {
		var turn gotSpan
		for _, tr := range turns {
			if len(childrenOf(tr, telemetry.SpanProviderAttempt)) == 2 {
				turn = tr
			}
		}
		require.NotNil(t, turn.Span, "a turn with two attempts")
		assert.Equal(t, workflows.OutcomeCompleted, turn.attr(telemetry.AttrTurnOutcome))
		assert.False(t, turn.failed(), "a turn the fallback answered did not fail")
		for _, a := range childrenOf(turn, telemetry.SpanProviderAttempt) {
			switch a.attr(telemetry.AttrProviderAttempt) {
			case "0":
				assert.True(t, a.failed())
				assert.Equal(t, "500", a.attr(telemetry.AttrHTTPStatus))
				assert.NotContains(t, a.Status.GetMessage(), "overloaded", "no provider text in a span")
			case "1":
				assert.False(t, a.failed())
				assert.Equal(t, "fallback", a.attr(telemetry.AttrProviderName))
				assert.Equal(t, "openai", a.attr(telemetry.AttrProviderKind))
				assert.Equal(t, "fallback", a.attr(telemetry.AttrProviderAttemptKind))
				assert.Equal(t, "200", a.attr(telemetry.AttrHTTPStatus))
			}
		}
	})

	t.Run("client tool pause and resume", func(t *testing.T) {
		var paused, resumed gotSpan
		for _, tr := range turns {
			switch {
			case tr.attr(telemetry.AttrTurnOutcome) == workflows.OutcomePaused:
				paused = tr
			case tr.attr(telemetry.AttrTurnResumed) == "true":
				resumed = tr
			}
		}
		require.NotNil(t, paused.Span)
		require.NotNil(t, resumed.Span)
		dispatch := childrenOf(paused, telemetry.SpanToolDispatch)
		require.Len(t, dispatch, 1)
		assert.Equal(t, "get_time", dispatch[0].attr(telemetry.AttrToolName))
		assert.Equal(t, string(events.DispatchClient), dispatch[0].attr(telemetry.AttrToolDispatch))
		assert.Equal(t, "14", dispatch[0].attr(telemetry.AttrToolInputBytes), `len({"zone":"UTC"})`)
		assert.Empty(t, dispatch[0].attr(telemetry.AttrToolIsError), "the server does not run a client tool")
		assert.True(t, resumed.linked(paused, telemetry.LinkResume), "a resume links to the paused turn")
		assert.False(t, resumed.childOf(paused), "and is not its child")
		assert.Equal(t, workflows.OutcomeCompleted, resumed.attr(telemetry.AttrTurnOutcome))
		req := rcv.find(func(h gotSpan) bool { return strings.HasPrefix(h.Name, "POST ") && resumed.childOf(h) })
		require.Len(t, req, 1, "the resume is a child of its own request")
	})

	t.Run("MCP", func(t *testing.T) {
		mt := turnsOf(m.sid)
		require.Len(t, mt, 1)
		dispatch := childrenOf(mt[0], telemetry.SpanToolDispatch)
		require.Len(t, dispatch, 1)
		ds := dispatch[0]
		assert.Equal(t, "list_files", ds.attr(telemetry.AttrToolName))
		assert.Equal(t, string(events.DispatchMCP), ds.attr(telemetry.AttrToolDispatch))
		assert.Equal(t, "16", ds.attr(telemetry.AttrToolInputBytes), `len({"path":"/data"})`)
		assert.Equal(t, "false", ds.attr(telemetry.AttrToolIsError))
		assert.NotEqual(t, "", ds.attr(telemetry.AttrToolOutputBytes))
		assert.NotEqual(t, "0", ds.attr(telemetry.AttrToolOutputBytes))
		calls := childrenOf(ds, telemetry.SpanMCPCall)
		require.Len(t, calls, 1)
		assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, calls[0].Kind)
		assert.Equal(t, "fs", calls[0].attr(telemetry.AttrMCPServer))
		assert.Equal(t, "list_files", calls[0].attr(telemetry.AttrToolName))
		assert.False(t, calls[0].failed())
		assert.Len(t, childrenOf(mt[0], telemetry.SpanProviderAttempt), 2, "one attempt per iteration")
	})

	t.Run("all providers failed", func(t *testing.T) {
		ft := turnsOf(f.sid)
		require.Len(t, ft, 1)
		turn := ft[0]
		assert.Equal(t, workflows.OutcomeProvidersFailed, turn.attr(telemetry.AttrTurnOutcome))
		assert.True(t, turn.failed())
		assert.Equal(t, "all providers failed", turn.Status.GetMessage())
		attempts := childrenOf(turn, telemetry.SpanProviderAttempt)
		require.Len(t, attempts, 2)
		for _, a := range attempts {
			assert.True(t, a.failed())
		}
		s := sessionOf(f.sid)
		assert.True(t, s.failed(), "the session ended in error")
	})

	t.Run("no secrets in spans", func(t *testing.T) {
		all := rcv.payload()
		for _, secret := range []string{d.key, d.sk, f.key, f.sk, "sk-fake-secret", secretText} {
			assert.NotContains(t, all, secret)
		}
	})

	t.Run("the Temporal UI shows the failed turn", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		it := e.srv.Temporal.GetWorkflowHistory(ctx, f.sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var failed []string
		var outcome workflows.TurnResult
		dc := converter.GetDefaultDataConverter()
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			switch ev.EventType {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				assert.EqualValues(t, 1, ev.GetActivityTaskStartedEventAttributes().Attempt, "a failed attempt is not retried")
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
				failed = append(failed, attemptFailure(t, ev.GetActivityTaskFailedEventAttributes().GetFailure()))
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				// Provider attempts run as local activities: each is a
				// LocalActivity marker, carrying its failure.
				m := ev.GetMarkerRecordedEventAttributes()
				if m.GetMarkerName() != "LocalActivity" {
					continue
				}
				var data struct {
					ActivityType string
					Attempt      int
				}
				require.NoError(t, dc.FromPayloads(m.GetDetails()["data"], &data))
				if data.ActivityType == workflows.ActRecordTurnResult {
					// The turn's outcome, as its driver got it.
					require.NoError(t, dc.FromPayloads(m.GetDetails()["result"], &outcome))
					continue
				}
				if data.ActivityType != workflows.ActCallProvider || m.GetFailure() == nil {
					continue
				}
				assert.Equal(t, 1, data.Attempt, "a failed attempt is not retried")
				failed = append(failed, attemptFailure(t, m.GetFailure()))
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
				out := ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome()
				require.NoError(t, dc.FromPayloads(out.GetSuccess(), &outcome))
			}
		}
		assert.Equal(t, []string{"HTTP 503", "HTTP 502"}, failed, "each failed attempt is a failed CallProvider")
		assert.Equal(t, workflows.OutcomeProvidersFailed, outcome.Outcome)
		assert.Equal(t, events.ReasonAllProvidersFailed, outcome.Reason)
		assert.Equal(t, "fallback: HTTP 502", outcome.LastError)

		desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, f.sid, "")
		require.NoError(t, err)
		memo := map[string]string{}
		for k, p := range desc.GetWorkflowExecutionInfo().GetMemo().GetFields() {
			var v string
			if dc.FromPayload(p, &v) == nil {
				memo[k] = v
			}
		}
		assert.Equal(t, "main", memo[workflows.MemoProfileName])
		assert.Equal(t, "all_providers_failed (fallback: HTTP 502)", memo[workflows.MemoLastError])
		assert.NotEmpty(t, memo[workflows.MemoLastErrorTurnID])
	})

	t.Run("Prometheus /metrics", func(t *testing.T) {
		resp, err := http.Get(e.srv.AdminURL + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		text := string(body)
		for _, name := range []string{
			`bae_turns_completed_total{otel_scope_name="baesrv",otel_scope_version="",outcome="providers_failed"} 1`,
			`bae_provider_requests_total{otel_scope_name="baesrv",otel_scope_version="",outcome="error",provider="anthropic"} 2`,
			"bae_provider_latency_bucket", "bae_tool_calls_total", "bae_tool_latency_bucket",
			`bae_provider_tokens_total{otel_scope_name="baesrv",otel_scope_version="",provider="primary",type="output"}`,
			`bae_provider_cost_total{otel_scope_name="baesrv",otel_scope_version="",provider="primary"} 0`,
			"bae_sessions_open", "bae_sessions_total", "bae_events_total", "bae_profiles_count", "bae_keys_count",
			"bae_mcp_sessions_live", "bae_turns_pending", "bae_sandboxes_live", "bae_subagents_active", "bae_drivers_registered",
			// The Temporal SDK's worker metrics (provider attempts are
			// local activities).
			"temporal_local_activity_execution_failed", "temporal_workflow_task_execution_latency",
		} {
			assert.Contains(t, text, name)
		}
		// OTLP push carries the same instruments, bae.mcp.sessions.live too.
		type flusher interface{ ForceFlush(context.Context) error }
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, tel.MeterProvider.(flusher).ForceFlush(ctx))
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for _, name := range config.MetricNames() {
			assert.True(t, rcv.metrics[name], "%s over OTLP", name)
		}
	})
}

// TestTelemetrySandboxAndSubagentSpans: an Auto-mode sandbox tool is a
// bae.tool.dispatch with a bae.sandbox.exec beneath, and a remote subagent
// runs in a trace of its own, linked back to the dispatch that launched it.
func TestTelemetrySandboxAndSubagentSpans(t *testing.T) {
	image := busyboxImage(t)
	rcv := startOTLPReceiver(t)
	tel := otlpTelemetry(t, rcv, nil)
	e := newEnv(t, envOpts{allowedTools: []string{}, telemetry: tel})
	pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}, "subagent_tools": []any{subagentDecl(image)}})
	d.reapOnCleanup()
	d.register()
	result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session.subscribe", "params": map[string]any{}})
	defer obs.Close()

	primary := e.fake.Lane("primary")
	primary.Enqueue(
		fakeprovider.ToolUse("tu_x", "run_shell_command", map[string]any{"command": "echo hi; exit 3"}),
		fakeprovider.ToolUse("tu_l", "launch_subagent", map[string]any{"harness": "echo", "model": "m1", "prompt": "hello sub"}),
		fakeprovider.Text("done"),
	)
	_, term := d.send("go")
	require.Equal(t, "done", firstText(message(term)))
	waitEvent(t, obs, "session.subagent.completed")

	// The subagent may complete before or after the turn's span ends.
	rcv.flushUntil(t, tel, named(telemetry.SpanSubagent, telemetry.AttrSessionID, d.sid), "the subagent's span")
	rcv.flushUntil(t, tel, named(telemetry.SpanTurn, telemetry.AttrSessionID, d.sid), "the turn's span")
	turn := rcv.one(t, "the turn", named(telemetry.SpanTurn, telemetry.AttrSessionID, d.sid))
	dispatches := rcv.find(func(s gotSpan) bool { return s.Name == telemetry.SpanToolDispatch && s.childOf(turn) })
	require.Len(t, dispatches, 2)
	var shell, launch gotSpan
	for _, ds := range dispatches {
		switch events.Dispatch(ds.attr(telemetry.AttrToolDispatch)) {
		case events.DispatchSandbox:
			shell = ds
		case events.DispatchSubagent:
			launch = ds
		}
	}
	require.NotNil(t, shell.Span)
	require.NotNil(t, launch.Span)

	assert.Equal(t, "run_shell_command", shell.attr(telemetry.AttrToolName))
	assert.Equal(t, "true", shell.attr(telemetry.AttrToolIsError), "a non-zero exit is an error result")
	assert.True(t, shell.failed())
	exec := rcv.one(t, "the sandbox exec", func(s gotSpan) bool { return s.Name == telemetry.SpanSandboxExec && s.childOf(shell) })
	assert.Equal(t, "3", exec.attr(telemetry.AttrSandboxExitCode))
	assert.Equal(t, "run_shell_command", exec.attr(telemetry.AttrToolName))
	assert.True(t, exec.failed())
	assert.Equal(t, "non-zero exit code", exec.Status.GetMessage())

	assert.Equal(t, "launch_subagent", launch.attr(telemetry.AttrToolName))
	assert.Equal(t, "false", launch.attr(telemetry.AttrToolIsError))
	sub := rcv.one(t, "the subagent", named(telemetry.SpanSubagent, telemetry.AttrSessionID, d.sid))
	assert.Empty(t, sub.ParentSpanId, "its own root")
	assert.NotEqual(t, turn.trace(), sub.trace(), "its own trace")
	assert.True(t, sub.linked(launch, telemetry.LinkSubagent), "linked back to the launch")
	assert.Regexp(t, `^sba_`, sub.attr(telemetry.AttrSubagentID))
	assert.Equal(t, telemetry.SubagentCompleted, sub.attr(telemetry.AttrSubagentOutcome))
	assert.False(t, sub.failed())
}

// The final metric collection at shutdown reads the store-backed gauges:
// the store must still be open then.
func TestTelemetryShutdownReadsGaugesBeforeTheStoreCloses(t *testing.T) {
	rcv := startOTLPReceiver(t)
	logs := &testlog.Buffer{}
	tel := otlpTelemetry(t, rcv, slog.New(slog.NewTextHandler(logs, nil)))
	srv := testenv.Start(t, testenv.Options{Telemetry: tel, LogOutput: logs})
	srv.Stop()
	out := logs.String()
	require.Contains(t, out, "shutting down")
	assert.NotContains(t, out, "closed pool")
	assert.NotContains(t, out, "telemetry failing")
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.True(t, rcv.metrics[telemetry.MetricSessionsOpen], "the final export carried the gauges")
}

// attemptFailure checks a failed provider attempt's failure and returns its
// message: a non-retryable ProviderAttemptFailed (itself or as the cause).
func attemptFailure(t *testing.T, fl *failurepb.Failure) string {
	t.Helper()
	for fl != nil && fl.GetApplicationFailureInfo() == nil {
		fl = fl.GetCause()
	}
	require.NotNil(t, fl, "an application failure")
	info := fl.GetApplicationFailureInfo()
	assert.Equal(t, workflows.ErrProviderAttemptFailed, info.Type)
	assert.True(t, info.NonRetryable)
	return fl.Message
}
