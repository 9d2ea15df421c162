package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/sdk"
)

func timeTool(calls *[]string) sdk.Tool {
	return sdk.Tool{
		Name:        "get_time",
		Description: "Return the time.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}}},
		Handler: func(ctx context.Context, input json.RawMessage) (any, error) {
			if sdk.SessionFromContext(ctx) == nil {
				return nil, errors.New("handler context lacks the session")
			}
			*calls = append(*calls, string(input))
			return "12:00", nil
		},
	}
}

func TestConnectDeclaresToolsAndRegistersDriver(t *testing.T) {
	f := newFake(t)
	var calls []string
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)),
		sdk.WithSandboxTool(sdk.ToolSpec{Name: "run_shell_command"}))
	require.NoError(t, err)
	assert.Equal(t, "ses_1", s.ID)
	assert.Equal(t, "bae_ses_1", s.Key())
	assert.Equal(t, "main", s.Profile.Name)

	require.Len(t, f.opens, 1)
	body := f.opens[0]
	assert.Equal(t, "test/1", body["client_version"])
	tools := body["tools"].([]any)
	require.Len(t, tools, 1)
	assert.Equal(t, "get_time", tools[0].(map[string]any)["name"])
	assert.Contains(t, tools[0].(map[string]any), "input_schema")
	sb := body["sandbox_tools"].([]any)
	require.Len(t, sb, 1)
	// A nil schema is declared as an empty object schema.
	assert.Equal(t, map[string]any{"type": "object", "properties": map[string]any{}}, sb[0].(map[string]any)["input_schema"])
	assert.NotContains(t, body, "subagent_tools", "omitted when none are declared")

	reg := f.rpcCalls("session.registerDriver")
	require.Len(t, reg, 1)
	assert.Equal(t, "{}", string(reg[0].Raw))
}

func TestConnectWithoutToolsSendsEmptyArray(t *testing.T) {
	f := newFake(t)
	_, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	assert.Equal(t, []any{}, f.opens[0]["tools"])
	assert.NotContains(t, f.opens[0], "sandbox_tools")
}

func TestConnectRejectsBadOptions(t *testing.T) {
	f := newFake(t)
	h := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	_, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(sdk.Tool{Name: "a", Handler: h}), sdk.WithTool(sdk.Tool{Name: "a", Handler: h}))
	assert.ErrorContains(t, err, "registered twice")
	_, err = sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(sdk.Tool{Name: "a"}))
	assert.ErrorContains(t, err, "no handler")
	cfg := f.cfg()
	cfg.ClientKey = ""
	_, err = sdk.Connect(context.Background(), cfg)
	assert.ErrorContains(t, err, "no client key")
	assert.Empty(t, f.opens)
}

func TestConnectProblemError(t *testing.T) {
	f := newFake(t)
	cfg := f.cfg()
	cfg.ClientKey = "bae_wrong"
	_, err := sdk.Connect(context.Background(), cfg)
	require.Error(t, err)
	assert.True(t, sdk.IsUnauthorized(err))
	var pe *sdk.ProblemError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 401, pe.Status)
	assert.Equal(t, "invalid or revoked client key", pe.Detail)
}

func TestConnectClosesSessionWhenRegistrationFails(t *testing.T) {
	f := newFake(t)
	f.register = func(w *ndjsonWriter, c rpcCall) { w.fail(c, -32000, "session is closed, not open") }
	_, err := sdk.Connect(context.Background(), f.cfg())
	require.Error(t, err)
	assert.True(t, sdk.IsSessionClosed(err))
	assert.Equal(t, 1, f.deletes)
}

func TestJoinPostsToJoinAndRegisters(t *testing.T) {
	f := newFake(t)
	s, err := sdk.Join(context.Background(), f.cfg(), "ses_1")
	require.NoError(t, err)
	assert.Equal(t, "ses_1", s.ID)
	assert.Len(t, f.opens, 1)
	assert.Len(t, f.rpcCalls("session.registerDriver"), 1)
}

// paused returns a sendMessage result asking for tools.
func result(content string, events ...sdk.Event) map[string]any {
	if events == nil {
		events = []sdk.Event{}
	}
	return map[string]any{
		"message": json.RawMessage(`{"role":"assistant","content":` + content + `}`),
		"events":  events,
	}
}

func TestSendRunsClientToolsOnly(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		switch len(f.rpcCalls("session.sendMessage")) {
		case 1:
			w.event(ev("evt_1", sdk.EventProviderRequest, `{"attempt":0,"kind":"primary"}`))
			w.event(ev("evt_2", sdk.EventToolCall, `{"id":"tu_mcp","name":"list","dispatch":"mcp"}`))
			w.result(c, result(`[
				{"type":"text","text":"let me check"},
				{"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC"},"dispatch":"client"},
				{"type":"tool_use","id":"tu_mcp","name":"list","input":{},"dispatch":"mcp"}]`,
				ev("evt_0", sdk.EventClientMessageSend, ""), ev("evt_1", sdk.EventProviderRequest, ""), ev("evt_3", sdk.EventServerMessageSend, "")))
		default:
			w.event(ev("evt_5", sdk.EventServerMessageSend, ""))
			w.result(c, result(`[{"type":"text","text":"It is noon."}]`, ev("evt_4", sdk.EventClientMessageSend, ""), ev("evt_5", sdk.EventServerMessageSend, "")))
		}
	}
	var order []string
	var calls []string
	hooks := sdk.Hooks{
		BeforeSend:   func(_ context.Context, m *sdk.Message) error { order = append(order, "before_send"); return nil },
		AfterReceive: func(_ context.Context, m *sdk.Message) error { order = append(order, "after_receive"); return nil },
		BeforeToolCall: func(_ context.Context, tu *sdk.ToolUse) error {
			order = append(order, "before_tool:"+tu.Name)
			return nil
		},
		AfterToolCall: func(_ context.Context, tu sdk.ToolUse, r *sdk.ToolResult) error {
			order = append(order, "after_tool:"+r.ToolUseID)
			return nil
		},
		OnEvent: func(_ context.Context, e sdk.Event) error { order = append(order, "event:"+string(e.Type)); return nil },
	}
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)), sdk.WithHooks(hooks))
	require.NoError(t, err)

	reply, err := s.Send(context.Background(), "what time is it?")
	require.NoError(t, err)
	assert.Equal(t, "It is noon.", reply.Text())
	assert.Equal(t, []string{`{"tz":"UTC"}`}, calls, "only the client block runs")
	assert.Equal(t, []string{
		"before_send", "event:provider.request", "event:tool.call", "after_receive",
		"before_tool:get_time", "after_tool:tu_1",
		"before_send", "event:server.message.send", "after_receive",
	}, order)
	assert.Equal(t, "evt_5", s.LastEventID())

	sends := f.rpcCalls("session.sendMessage")
	require.Len(t, sends, 2)
	assert.JSONEq(t, `{"message":{"role":"user","content":[{"type":"text","text":"what time is it?"}]}}`, string(sends[0].Raw))
	assert.JSONEq(t, `{"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"12:00"}]}]}}`, string(sends[1].Raw),
		"exactly our result; nothing for the mcp block")
	assert.NotEqual(t, string(sends[0].ID), string(sends[1].ID), "request ids are unique")
}

func TestSendHandlerErrorBecomesIsErrorResult(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			w.result(c, result(`[
				{"type":"tool_use","id":"tu_1","name":"flaky","input":{},"dispatch":"client"},
				{"type":"tool_use","id":"tu_2","name":"ghost","input":{},"dispatch":"client"}]`))
			return
		}
		w.result(c, result(`[{"type":"text","text":"ok"}]`))
	}
	flaky := sdk.Tool{Name: "flaky", Handler: func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("disk on fire")
	}}
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(flaky))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "go")
	require.NoError(t, err)
	sends := f.rpcCalls("session.sendMessage")
	require.Len(t, sends, 2)
	assert.JSONEq(t, `{"message":{"role":"user","content":[
		{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"disk on fire"}],"is_error":true},
		{"type":"tool_result","tool_use_id":"tu_2","content":[{"type":"text","text":"no handler registered for tool \"ghost\""}],"is_error":true}]}}`,
		string(sends[1].Raw))
}

func TestSendWithoutDispatchFallsBackToRegisteredNames(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			w.result(c, result(`[
				{"type":"tool_use","id":"tu_1","name":"get_time","input":{}},
				{"type":"tool_use","id":"tu_2","name":"server_side","input":{}}]`))
			return
		}
		w.result(c, result(`[{"type":"text","text":"done"}]`))
	}
	var calls []string
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "go")
	require.NoError(t, err)
	assert.Len(t, calls, 1)
	sends := f.rpcCalls("session.sendMessage")
	require.Len(t, sends, 2)
	blocks := sends[1].Params["message"].(map[string]any)["content"].([]any)
	require.Len(t, blocks, 1)
	assert.Equal(t, "tu_1", blocks[0].(map[string]any)["tool_use_id"])
}

func TestSendEndsWhenOnlyServerToolsRemain(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.result(c, result(`[{"type":"tool_use","id":"tu_1","name":"get_time","input":{},"dispatch":"mcp"}]`))
	}
	var calls []string
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)))
	require.NoError(t, err)
	reply, err := s.Send(context.Background(), "go")
	require.NoError(t, err)
	assert.Empty(t, calls, "dispatch wins over a name collision")
	assert.Len(t, reply.ToolUses(), 1)
	assert.Len(t, f.rpcCalls("session.sendMessage"), 1)
}

func TestSendProvidersFailed(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.result(c, result(`[{"type":"text","text":"The provider is currently unavailable."}]`,
			ev("evt_1", sdk.EventProviderResponse, `{"ok":false}`),
			ev("evt_2", sdk.EventSessionError, `{"reason":"all_providers_failed"}`)))
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	var pf *sdk.ProvidersFailedError
	require.ErrorAs(t, err, &pf)
	assert.Len(t, pf.Events, 2)
	assert.Contains(t, pf.Message.Text(), "unavailable")
}

func TestSendRPCError(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.fail(c, -32001, "call session.registerDriver before session.sendMessage")
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	assert.True(t, sdk.IsDriverNotRegistered(err), "%v", err)
	var re *sdk.RPCError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, sdk.CodeDriverNotRegistered, re.Code)
}

func TestSendStreamWithoutTerminal(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.event(ev("evt_1", sdk.EventProviderRequest, "")) }
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	assert.ErrorContains(t, err, "without a terminal response")
}

func TestSendMalformedFrame(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.line(`{"jsonrpc":"2.0","method":`) }
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	assert.ErrorContains(t, err, "read stream")
}

func TestSendLaggedNotificationIsAnError(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.line(`{"jsonrpc":"2.0","error":{"code":-32000,"message":"lagged; reconnect with since_event_id"}}`)
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	assert.True(t, sdk.IsRPCCode(err, sdk.CodeApplicationError), "%v", err)
}

func TestHookErrorAbortsLoop(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.result(c, result(`[{"type":"tool_use","id":"tu_1","name":"get_time","input":{},"dispatch":"client"}]`))
	}
	var calls []string
	boom := errors.New("boom")
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)),
		sdk.WithHooks(sdk.Hooks{BeforeToolCall: func(context.Context, *sdk.ToolUse) error { return boom }}))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	require.ErrorIs(t, err, boom)
	var he *sdk.HookError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "BeforeToolCall", he.Hook)
	assert.Empty(t, calls)
	assert.Len(t, f.rpcCalls("session.sendMessage"), 1, "no continuation after an abort")
}

func TestOnEventErrorAbortsMidStream(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.event(ev("evt_1", sdk.EventProviderRequest, ""))
		w.result(c, result(`[{"type":"text","text":"x"}]`))
	}
	s, err := sdk.Connect(context.Background(), f.cfg(),
		sdk.WithHooks(sdk.Hooks{OnEvent: func(context.Context, sdk.Event) error { return errors.New("stop") }}))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	var he *sdk.HookError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "OnEvent", he.Hook)
}

func TestHooksMayRewrite(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			w.result(c, result(`[{"type":"tool_use","id":"tu_1","name":"get_time","input":{"tz":"UTC"},"dispatch":"client"}]`))
			return
		}
		w.result(c, result(`[{"type":"text","text":"ok"}]`))
	}
	var calls []string
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(timeTool(&calls)), sdk.WithHooks(sdk.Hooks{
		BeforeSend: func(_ context.Context, m *sdk.Message) error {
			if t, ok := m.Content[0].(sdk.Text); ok {
				m.Content[0] = sdk.Text{Text: strings.ToUpper(t.Text)}
			}
			return nil
		},
		BeforeToolCall: func(_ context.Context, tu *sdk.ToolUse) error { tu.Input = json.RawMessage(`{"tz":"CET"}`); return nil },
		AfterToolCall: func(_ context.Context, _ sdk.ToolUse, r *sdk.ToolResult) error {
			r.Content = []sdk.Block{sdk.Text{Text: "redacted"}}
			return nil
		},
	}))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []string{`{"tz":"CET"}`}, calls)
	sends := f.rpcCalls("session.sendMessage")
	assert.Contains(t, string(sends[0].Raw), `"HI"`)
	assert.Contains(t, string(sends[1].Raw), `"redacted"`)
	assert.NotContains(t, string(sends[1].Raw), "12:00")
}

func TestSendCancelReturnsPromptly(t *testing.T) {
	f := newFake(t)
	inflight := make(chan struct{})
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		// Like a queued FIFO turn: the stream opens and stays silent.
		close(inflight)
		<-w.r.Context().Done()
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-inflight; cancel() }()
	start := time.Now()
	_, err = s.Send(ctx, "hi")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, context.Canceled, err, "Send returns ctx.Err() itself")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestSendCancelDuringToolHandler(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.result(c, result(`[{"type":"tool_use","id":"tu_1","name":"slow","input":{},"dispatch":"client"}]`))
	}
	ctx, cancel := context.WithCancel(context.Background())
	slow := sdk.Tool{Name: "slow", Handler: func(hctx context.Context, _ json.RawMessage) (any, error) {
		cancel()
		<-hctx.Done()
		return nil, hctx.Err()
	}}
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithTool(slow))
	require.NoError(t, err)
	_, err = s.Send(ctx, "hi")
	assert.Equal(t, context.Canceled, err)
	assert.Len(t, f.rpcCalls("session.sendMessage"), 1)
}

func TestLargeNotificationLine(t *testing.T) {
	f := newFake(t)
	big := strings.Repeat("x", 5<<20)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.event(ev("evt_1", sdk.EventProviderRequest, `{"blob":"`+big+`"}`))
		w.result(c, result(`[{"type":"text","text":"ok"}]`))
	}
	var size int
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithHooks(sdk.Hooks{OnEvent: func(_ context.Context, e sdk.Event) error {
		size = len(e.Payload)
		return nil
	}}))
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	require.NoError(t, err)
	assert.Greater(t, size, 5<<20)
}

func TestTraceparentPropagation(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.result(c, result(`[{"type":"text","text":"ok"}]`)) }
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)

	_, err = s.Send(context.Background(), "plain")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	_, err = s.Send(trace.ContextWithSpanContext(context.Background(), sc), "traced")
	require.NoError(t, err)

	sends := f.rpcCalls("session.sendMessage")
	require.Len(t, sends, 2)
	assert.Empty(t, sends[0].Header.Get("traceparent"), "no span, no header")
	assert.Equal(t, "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", sends[1].Header.Get("traceparent"))
}

func TestRPCHelpersWireShapes(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		switch c.Method {
		case "session.startRemoteSandbox":
			w.event(ev("evt_9", sdk.EventSessionSandboxStart, `{"image":"python:3.12","dispatch":"remote"}`))
			w.result(c, map[string]any{"sandbox_id": "sb_1", "image": "python:3.12", "started_at": "2026-07-06T18:26:10.000Z"})
		case "session.execRemoteSandbox":
			w.result(c, map[string]any{"stdout": "Python 3.12.3\n", "stderr": "", "exit_code": 0})
		case "session.stopRemoteSandbox":
			w.result(c, map[string]any{"stopped": true, "image": "python:3.12", "sandbox_id": "sb_1"})
		case "session.cancelSubagent":
			w.fail(c, -32014, "subagent_not_found")
		default:
			w.result(c, map[string]any{"ok": true})
		}
	}
	var seen []sdk.EventType
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithHooks(sdk.Hooks{OnEvent: func(_ context.Context, e sdk.Event) error {
		seen = append(seen, e.Type)
		return nil
	}}))
	require.NoError(t, err)
	ctx := context.Background()

	sb, err := s.StartRemoteSandbox(ctx, "python:3.12")
	require.NoError(t, err)
	assert.Equal(t, "sb_1", sb.SandboxID)
	require.NotNil(t, sb.StartedAt)
	assert.Equal(t, 2026, sb.StartedAt.Year())
	assert.Equal(t, []sdk.EventType{sdk.EventSessionSandboxStart}, seen)

	res, err := s.ExecRemoteSandbox(ctx, "python --version")
	require.NoError(t, err)
	assert.Equal(t, sdk.ExecResult{Stdout: "Python 3.12.3\n", ExitCode: 0}, res)

	stopped, err := s.StopRemoteSandbox(ctx)
	require.NoError(t, err)
	assert.True(t, stopped.Stopped)

	_, err = s.CancelSubagent(ctx, "sba_x")
	assert.True(t, sdk.IsSubagentNotFound(err))

	require.NoError(t, s.ReportLocalSandbox(ctx, sdk.LocalSandboxReport{State: sdk.SandboxRunning, Image: "alpine", ContainerID: "c1"}))
	require.NoError(t, s.ReportLocalSandbox(ctx, sdk.LocalSandboxReport{State: sdk.SandboxStopped, Unsandboxed: true}))
	code := 0
	require.NoError(t, s.ReportLocalSubagent(ctx, sdk.LocalSubagentReport{State: sdk.SubagentCompleted, SubagentID: "sba_1", Harness: "claude", Model: "m", ExitCode: &code}))
	spec := sdk.ToolSpec{Name: "get_time", Description: "d"}
	require.NoError(t, s.UpdateClientTools(ctx, []sdk.ToolSpec{spec}))
	assert.Equal(t, []sdk.ToolSpec{spec}, s.ClientTools())
	require.NoError(t, s.UpdateClientTools(ctx, nil))
	assert.Empty(t, s.ClientTools())

	wire := func(method string, i int) string { return string(f.rpcCalls(method)[i].Raw) }
	assert.JSONEq(t, `{"image":"python:3.12"}`, wire("session.startRemoteSandbox", 0))
	assert.JSONEq(t, `{"command":"python --version"}`, wire("session.execRemoteSandbox", 0))
	assert.JSONEq(t, `{"subagent_id":"sba_x"}`, wire("session.cancelSubagent", 0))
	assert.JSONEq(t, `{"state":"running","image":"alpine","container_id":"c1","detail":null}`, wire("session.reportLocalSandbox", 0))
	assert.JSONEq(t, `{"state":"stopped","image":null,"unsandboxed":true,"container_id":null,"detail":null}`, wire("session.reportLocalSandbox", 1))
	assert.JSONEq(t, `{"state":"completed","subagent_id":"sba_1","harness":"claude","model":"m","detail":null,"reason":null,"exit_code":0}`, wire("session.reportLocalSubagent", 0))
	assert.JSONEq(t, `{"tools":[{"name":"get_time","description":"d","input_schema":{"type":"object","properties":{}}}]}`, wire("session.updateClientTools", 0))
	assert.JSONEq(t, `{"tools":[]}`, wire("session.updateClientTools", 1))
}

func TestParticipantsAndClose(t *testing.T) {
	f := newFake(t)
	var hooked []string
	s, err := sdk.Connect(context.Background(), f.cfg(),
		sdk.WithCloseHook(func(context.Context, *sdk.Session) error { hooked = append(hooked, "first"); return nil }),
		sdk.WithCloseHook(func(context.Context, *sdk.Session) error {
			hooked = append(hooked, "second")
			return errors.New("partial")
		}))
	require.NoError(t, err)
	drivers, err := s.Participants(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"key_a", "key_b"}, drivers)

	err = s.Close(context.Background())
	assert.ErrorContains(t, err, "partial")
	assert.Equal(t, []string{"second", "first"}, hooked, "newest hook first")
	assert.Equal(t, 1, f.deletes, "the DELETE still happens")
	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, 1, f.deletes, "Close after a successful DELETE is a no-op")
	assert.Len(t, hooked, 2, "hooks run once")
}

func TestCloseRetriesAFailedDelete(t *testing.T) {
	f := newFake(t)
	var hooks int
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithCloseHook(func(context.Context, *sdk.Session) error { hooks++; return nil }))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, s.Close(ctx), context.Canceled)
	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, 1, f.deletes)
	assert.Equal(t, 1, hooks)
}

func TestServerMeta(t *testing.T) {
	f := newFake(t)
	f.ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/api/v1/meta", r.URL.Path)
		_, _ = w.Write([]byte(`{"version":"0.1.0","api_versions":["v1"]}`))
	})
	m, err := sdk.ServerMeta(context.Background(), f.cfg())
	require.NoError(t, err)
	assert.Equal(t, []string{"v1"}, m.APIVersions)
}

// echoKey makes the fake honour Idempotency-Key the way baesrv does.
func echoKey(w http.ResponseWriter, c rpcCall) bool {
	if k := c.Header.Get(sdk.IdempotencyHeader); k != "" {
		w.Header().Set(sdk.IdempotencyHeader, k)
	}
	return false
}

func TestSendResendsALostResponseUnderTheSameKey(t *testing.T) {
	f := newFake(t)
	f.before = echoKey
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.event(ev("evt_1", sdk.EventProviderRequest, ""))
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			return // the stream breaks before its terminal line
		}
		w.event(ev("evt_2", sdk.EventServerMessageSend, ""))
		w.result(c, map[string]any{"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "once"}}}, "events": []any{}})
	}
	var seen []string
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithHooks(sdk.Hooks{OnEvent: func(_ context.Context, e sdk.Event) error {
		seen = append(seen, e.ID)
		return nil
	}}))
	require.NoError(t, err)
	reply, err := s.Send(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, "once", reply.Text())
	calls := f.rpcCalls("session.sendMessage")
	require.Len(t, calls, 2)
	key := calls[0].Header.Get(sdk.IdempotencyHeader)
	assert.Len(t, key, 32)
	assert.Equal(t, key, calls[1].Header.Get(sdk.IdempotencyHeader), "the resend reuses the key")
	assert.Equal(t, []string{"evt_1", "evt_2"}, seen, "a relayed event reaches OnEvent once")

	// The next message has a key of its own.
	_, err = s.Send(context.Background(), "again")
	require.NoError(t, err)
	calls = f.rpcCalls("session.sendMessage")
	require.Len(t, calls, 3)
	assert.NotEqual(t, key, calls[2].Header.Get(sdk.IdempotencyHeader))
}

func TestSendOnceWithCallerKeyCountsAttempts(t *testing.T) {
	f := newFake(t)
	f.before = func(w http.ResponseWriter, c rpcCall) bool {
		if len(f.rpcCalls("session.sendMessage")) == 1 {
			// The server could not serve it (a database outage): nothing stored.
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"type":"internal","title":"Internal Server Error","status":500}`))
			return true
		}
		return echoKey(w, c)
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	res, err := s.SendOnce(context.Background(), "hi", sdk.SendOptions{IdempotencyKey: "mine-1"})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts)
	for _, c := range f.rpcCalls("session.sendMessage") {
		assert.Equal(t, "mine-1", c.Header.Get(sdk.IdempotencyHeader))
	}
}

func TestSendNeverResendsABrokenStreamWithoutTheEcho(t *testing.T) {
	f := newFake(t) // a server that ignores Idempotency-Key
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.event(ev("evt_1", sdk.EventProviderRequest, "")) }
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	require.ErrorIs(t, err, sdk.ErrNoTerminal)
	assert.Len(t, f.rpcCalls("session.sendMessage"), 1, "a resend could be a second turn")

	// Nor a definite answer, nor beyond SendRetries.
	f.before = func(w http.ResponseWriter, c rpcCall) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	cfg := f.cfg()
	cfg.SendRetries = 1
	s2, err := sdk.Connect(context.Background(), cfg)
	require.NoError(t, err)
	before := len(f.rpcCalls("session.sendMessage"))
	_, err = s2.Send(context.Background(), "hi")
	require.Error(t, err)
	assert.Equal(t, before+2, len(f.rpcCalls("session.sendMessage")), "one send and one resend")
}
