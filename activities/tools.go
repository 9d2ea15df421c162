package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// toolInput finds a tool_use block's input in the iteration's stored
// assistant message (kept out of workflow history), or, for a held call a
// decider approved with edits, the approved arguments.
func (a *Activities) toolInput(ctx context.Context, in workflows.ToolCallInput) (json.RawMessage, error) {
	if edited, ok, err := a.approvedInput(ctx, in); err != nil || ok {
		return edited, err
	}
	msg, err := a.Store.CachedMessage(ctx, in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)))
	if err != nil {
		return nil, fmt.Errorf("load assistant message: %w", err)
	}
	arr, _ := blocksOf(msg.Content)
	for _, b := range arr {
		if blockType(b) == "tool_use" && strField(b, "id") == in.Call.ID {
			if b["input"] == nil {
				return json.RawMessage(`{}`), nil
			}
			return json.Marshal(b["input"])
		}
	}
	return nil, fmt.Errorf("tool_use %s not found in assistant message", in.Call.ID)
}

// inputOrFence is toolInput, except that a call whose assistant message
// is gone (taken out of the conversation with its turn) fails with the
// fence's store.ErrTurnSuperseded: superseded, not a not-found to retry
// until the turn fails at this step, after a later turn.
func (a *Activities) inputOrFence(ctx context.Context, in workflows.ToolCallInput) (json.RawMessage, error) {
	input, err := a.toolInput(ctx, in)
	if errors.Is(err, store.ErrNotFound) {
		if ferr := a.toolTx(ctx, in, func(*store.Tx) error { return nil }); ferr != nil {
			return nil, ferr
		}
	}
	return input, err
}

// recorded reports whether this call's tool.result is already logged.
func (a *Activities) recorded(ctx context.Context, in workflows.ToolCallInput) (bool, error) {
	_, err := a.Store.EventByIdem(ctx, in.SessionID, idem(in.TurnID, toolStep(in.Iteration, in.Call.ID)+"/result"))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return false, err
}

func (a *Activities) event(in workflows.ToolCallInput, step string, payload events.Payload) store.NewEvent {
	return store.NewEvent{IdemKey: idem(in.TurnID, toolStep(in.Iteration, in.Call.ID)+"/"+step), TurnID: in.TurnID, ClientKeyID: in.ClientKeyID, Payload: payload}
}

// toolPrologue runs the database steps before a server-side tool's side
// effect, waiting out a database outage: it reports done when the call's
// result is already logged (a retry after the outcome was stored), and
// otherwise loads the tool input and logs the request event built from it,
// fenced by the call's iteration: a run of a superseded turn calls nothing.
func (a *Activities) toolPrologue(ctx context.Context, in workflows.ToolCallInput, request func(input json.RawMessage) store.NewEvent) (json.RawMessage, bool, error) {
	var input json.RawMessage
	var done bool
	err := a.untilStored(ctx, "prepare tool call", func(ctx context.Context) error {
		var err error
		if done, err = a.recorded(ctx, in); err != nil || done {
			return err
		}
		if input, err = a.inputOrFence(ctx, in); err != nil {
			return err
		}
		return a.toolTx(ctx, in, func(tx *store.Tx) error {
			_, err := tx.AppendEvents(ctx, in.SessionID, request(input))
			return err
		})
	})
	if err != nil {
		done, err = a.toolFenced(ctx, in, err)
	}
	return input, done, err
}

// toolTx runs fn in a transaction fenced by the call's iteration
// (toolFence): it stores nothing once the conversation moved on from the
// call's assistant message, and fails with store.ErrTurnSuperseded.
func (a *Activities) toolTx(ctx context.Context, in workflows.ToolCallInput, fn func(tx *store.Tx) error) error {
	return a.Store.Tx(ctx, func(tx *store.Tx) error {
		tx.Fence(toolFence(in))
		return fn(tx)
	})
}

// storeToolOutcome logs a tool's response and result events, waiting out a
// database outage so that the side effect already done is not repeated.
// Fenced (toolTx): a run of a superseded turn stores nothing and fails
// with workflows.ErrTurnSuperseded; a run that finds the result stored by
// another run of the call leaves it as it is.
func (a *Activities) storeToolOutcome(ctx context.Context, in workflows.ToolCallInput, evs ...store.NewEvent) error {
	err := a.untilStored(ctx, "store tool outcome", func(ctx context.Context) error {
		return a.toolTx(ctx, in, func(tx *store.Tx) error {
			_, err := tx.AppendEvents(ctx, in.SessionID, evs...)
			return err
		})
	})
	if err != nil {
		_, err = a.toolFenced(ctx, in, err)
	}
	return err
}

func textContent(s string) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": s}})
	return b
}

// CallMCPTool dispatches one tool_use to its MCP server.
func (a *Activities) CallMCPTool(ctx context.Context, in workflows.ToolCallInput) (workflows.ToolCallResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	return workflows.ToolCallResult{}, a.callMCPTool(ctx, in)
}

func (a *Activities) callMCPTool(ctx context.Context, in workflows.ToolCallInput) error {
	server := events.Optional(in.Call.Server)
	input, done, err := a.toolPrologue(ctx, in, func(input json.RawMessage) store.NewEvent {
		return a.event(in, "req", events.MCPRequestPayload{
			Method: "tools/call", ServerName: server, Tool: in.Call.Name, Input: input,
		})
	})
	if err != nil || done {
		return err
	}
	ctx, span := a.dispatchSpan(ctx, in.Span, in.Call, len(input))
	defer span.End()
	response := events.MCPResponsePayload{ServerName: server}
	var content json.RawMessage
	isErr := true
	switch {
	case a.MCP == nil || in.Call.Server == "":
		msg := fmt.Sprintf("no MCP server is configured for tool '%s'", in.Call.Name)
		response.Error = msg
		content = textContent("MCP error: " + msg)
	default:
		stop := heartbeatEvery(ctx, 5*time.Second)
		started := time.Now()
		mctx, mspan := a.Spans.Start(ctx, telemetry.SpanMCPCall, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String(telemetry.AttrMCPServer, in.Call.Server), attribute.String(telemetry.AttrToolName, in.Call.Name)))
		result, cerr := a.MCP.CallTool(mctx, in.SessionID, in.Call.Server, in.Call.Name, input)
		endMCPCall(mspan, result, cerr)
		stop()
		a.Metrics.ToolLatency(ctx, events.DispatchMCP, time.Since(started))
		if cerr != nil && errors.Is(ctx.Err(), context.Canceled) {
			// The worker is stopping: not the tool's failure. Temporal retries
			// the call elsewhere; recording it would answer the model with a
			// bogus error.
			return fmt.Errorf("MCP tool %s: %w", in.Call.Name, ctx.Err())
		}
		if cerr != nil {
			response.Error = cerr.Error()
			content = textContent("MCP error: " + cerr.Error())
		} else {
			var r struct {
				Content json.RawMessage `json:"content"`
				IsError bool            `json:"isError"`
			}
			_ = json.Unmarshal(result, &r)
			isErr = r.IsError
			content = r.Content
			if len(content) == 0 || string(content) == "null" {
				content = json.RawMessage(`[]`)
			}
			response.OK, response.Result = !isErr, result
		}
	}
	endDispatch(span, isErr, content)
	return a.storeToolOutcome(ctx, in,
		a.event(in, "resp", response),
		a.event(in, "result", events.ToolResultPayload{ToolUseID: in.Call.ID, Dispatch: events.DispatchMCP, ServerName: server, IsError: isErr, Content: content}),
	)
}

// renderExec renders a sandbox exec result as tool_result content: stdout,
// then a [stderr] section, then the exit code when non-zero and a notice
// when the command timed out. A truncated stream already ends with its
// "[output truncated: …]" line.
func renderExec(r sandbox.ExecResult) json.RawMessage {
	text := r.Stdout
	line := func(s string) {
		if text != "" && text[len(text)-1] != '\n' {
			text += "\n"
		}
		text += s
	}
	if strings.TrimSpace(r.Stderr) != "" {
		line("[stderr]\n" + r.Stderr)
	}
	if r.ExitCode != 0 {
		line(fmt.Sprintf("[exit_code: %d]", r.ExitCode))
	}
	if r.TimedOut {
		line(fmt.Sprintf("[timed out after %s: the command was killed]", r.Timeout))
	}
	return textContent(text)
}

// execID names one tool call's command inside the sandbox. It is the same
// on every attempt of the activity, so a retry collects the first run. The
// turn and iteration are part of it because tool_use ids come from the
// provider and need not be unique across turns.
func execID(in workflows.ToolCallInput) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d/%s", in.SessionID, in.TurnID, in.Iteration, in.Call.ID)))
	return "x" + hex.EncodeToString(sum[:16])
}

// ExecSandbox runs an Auto-mode sandbox tool's command in the session's
// remote sandbox.
func (a *Activities) ExecSandbox(ctx context.Context, in workflows.ToolCallInput) (workflows.ToolCallResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	return workflows.ToolCallResult{}, a.execSandbox(ctx, in)
}

func (a *Activities) execSandbox(ctx context.Context, in workflows.ToolCallInput) error {
	var command string
	var hasCmd bool
	input, done, err := a.toolPrologue(ctx, in, func(input json.RawMessage) store.NewEvent {
		var parsed map[string]any
		_ = json.Unmarshal(input, &parsed)
		command, hasCmd = parsed["command"].(string)
		var cmdField any
		if hasCmd {
			cmdField = command
		}
		return a.event(in, "req", events.SandboxRequestPayload{Tool: in.Call.Name, Input: input, Command: cmdField})
	})
	if err != nil || done {
		return err
	}
	ctx, span := a.dispatchSpan(ctx, in.Span, in.Call, len(input))
	defer span.End()
	var sb *store.SandboxState
	if err := a.untilStored(ctx, "read sandbox", func(ctx context.Context) error {
		sb, err = a.Store.Sandbox(ctx, in.SessionID)
		return err
	}); err != nil {
		return err
	}
	var evs []store.NewEvent
	var response events.SandboxResponsePayload
	var content json.RawMessage
	isErr := true
	switch {
	// A slot claimed by a start still in progress has no container id yet:
	// that is not a running sandbox.
	case sb == nil || sb.ID == "" || a.Sandbox == nil:
		msg := fmt.Sprintf("no remote sandbox is running for tool '%s'; call session.startRemoteSandbox first", in.Call.Name)
		response.Error = msg
		content = textContent("sandbox error: " + msg)
	case !hasCmd:
		msg := fmt.Sprintf("sandbox tool '%s' input is missing the required string \"command\"", in.Call.Name)
		response.Error = msg
		content = textContent("sandbox error: " + msg)
	default:
		stop := heartbeatEvery(ctx, 5*time.Second)
		started := time.Now()
		timeout := time.Duration(sb.ExecTimeoutSecs) * time.Second
		xctx, xspan := a.Spans.Start(ctx, telemetry.SpanSandboxExec, trace.WithAttributes(attribute.String(telemetry.AttrToolName, in.Call.Name)))
		r, xerr := a.Sandbox.ExecOnce(xctx, sb.ID, sandbox.ExecRequest{ID: execID(in), Command: command, Timeout: timeout})
		endSandboxExec(xspan, r, xerr)
		stop()
		a.Metrics.ToolLatency(ctx, events.DispatchSandbox, time.Since(started))
		if (xerr != nil && errors.Is(ctx.Err(), context.Canceled)) || errors.Is(context.Cause(ctx), ErrInterrupted) {
			// Interrupted: the interrupt records the call's result.
			// As for MCP: a stopping worker is retried, not recorded. The
			// command keeps running; the retry collects it. (A deadline is
			// the command's own failure and is recorded.)
			return fmt.Errorf("sandbox tool %s: %w", in.Call.Name, ctx.Err())
		}
		if r.Collected {
			a.logger(ctx, in.TurnID).Info("sandbox command collected from an earlier attempt", "tool_use_id", in.Call.ID)
		}

		if xerr != nil {
			msg := xerr.Error()
			evs = append(evs, a.event(in, "err", events.RemoteSandbox{
				Kind: events.SessionSandboxError, Image: sb.Image, SandboxID: sb.ID, Phase: "exec", Detail: msg,
			}))
			response = events.SandboxResponsePayload{SandboxID: &sb.ID, Error: msg}
			content = textContent("sandbox error: " + msg)
		} else {
			isErr = r.ExitCode != 0 || r.TimedOut
			response = events.SandboxResponsePayload{SandboxID: &sb.ID, OK: !isErr, Result: r}
			content = renderExec(r)
		}
	}
	endDispatch(span, isErr, content)
	evs = append(evs,
		a.event(in, "resp", response),
		a.event(in, "result", events.ToolResultPayload{ToolUseID: in.Call.ID, Dispatch: events.DispatchSandbox, IsError: isErr, Content: content}),
	)
	err = a.storeToolOutcome(ctx, in, evs...)
	if err != nil && !isSuperseded(err) {
		return err
	}
	if sb != nil && sb.ID != "" && a.Sandbox != nil && hasCmd {
		// Stored, or never to be (the turn was superseded): the recorded
		// output is no longer needed (the claim stays, so it never runs
		// again).
		if rerr := a.Sandbox.ReleaseExec(ctx, sb.ID, execID(in)); rerr != nil {
			a.logger(ctx, in.TurnID).Debug("release sandbox exec record", "error", rerr)
		}
	}
	return err
}
