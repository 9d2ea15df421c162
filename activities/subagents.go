package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"

	"github.com/bae-go/bae-go/cmdtemplate"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/tooldecl"
	"github.com/bae-go/bae-go/workflows"
)

// subagentOutputCap bounds each captured stream of a remote subagent.
const subagentOutputCap = 64 << 10

const defaultMaxSubagents = 8

func subagentContent(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return textContent(string(b))
}

func subagentError(msg string) (json.RawMessage, bool) {
	return subagentContent(map[string]any{"error": msg}), true
}

// subagentID is derived from the turn and tool call, so a retried launch
// reuses the same subagent.
func subagentID(turnID, callID string) string {
	sum := sha256.Sum256([]byte(turnID + "/" + callID))
	return "sba_" + hex.EncodeToString(sum[:16])
}

// RunSubagentTool dispatches launch_subagent-style tools and the status tool.
func (a *Activities) RunSubagentTool(ctx context.Context, in workflows.ToolCallInput) (workflows.ToolCallResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	var res workflows.ToolCallResult
	if done, err := a.recorded(ctx, in); err != nil || done {
		if done {
			// A retry after the result was logged: relaunch only if the
			// subagent row exists and is still running without a worker.
			res.Launch = a.existingLaunch(ctx, in)
		}
		return res, err
	}
	input, err := a.inputOrFence(ctx, in)
	if err != nil {
		return res, a.turnSuperseded(ctx, in.TurnID, "subagent tool", err, "tool_use_id", in.Call.ID)
	}
	ctx, span := a.dispatchSpan(ctx, in.Span, in.Call, len(input))
	defer span.End()
	var content json.RawMessage
	var isErr bool
	var evict []string
	started := time.Now()
	if in.Call.Name == tooldecl.StatusTool {
		content, isErr, evict, err = a.subagentStatus(ctx, in.SessionID, input)
	} else {
		content, isErr, res.Launch, err = a.launchSubagent(ctx, in, input)
	}
	if err != nil {
		// A launch is stored fenced: a superseded turn launches nothing.
		done, ferr := a.toolFenced(ctx, in, err)
		if done {
			res.Launch = a.existingLaunch(ctx, in)
			return res, nil
		}
		return res, ferr
	}
	endDispatch(span, isErr, content)
	if res.Launch != nil {
		// The subagent's own trace links back to this dispatch.
		res.Launch.Link = telemetry.RefOf(span)
	}
	a.Metrics.ToolLatency(ctx, events.DispatchSubagent, time.Since(started))
	result := a.event(in, "result", events.ToolResultPayload{ToolUseID: in.Call.ID, Dispatch: events.DispatchSubagent, IsError: isErr, Content: content})
	if len(evict) == 0 {
		return res, a.storeToolOutcome(ctx, in, result)
	}
	// The statuses reported are evicted with the result that reports them,
	// or not at all: a retry after a failure reads them again, and a
	// superseded turn's run evicts nothing (fenced).
	err = a.untilStored(ctx, "store tool outcome", func(ctx context.Context) error {
		return a.toolTx(ctx, in, func(tx *store.Tx) error {
			if err := tx.EvictSubagents(ctx, in.SessionID, evict); err != nil {
				return err
			}
			_, err := tx.AppendEvents(ctx, in.SessionID, result)
			return err
		})
	})
	if err != nil {
		_, err = a.toolFenced(ctx, in, err)
	}
	return res, err
}

func (a *Activities) existingLaunch(ctx context.Context, in workflows.ToolCallInput) *workflows.SubagentLaunch {
	sa, err := a.Store.GetSubagent(ctx, in.SessionID, subagentID(in.TurnID, in.Call.ID))
	if err != nil || sa.Status != store.SubagentRunning {
		return nil
	}
	return &workflows.SubagentLaunch{SubagentID: sa.ID, TimeoutSecs: sa.TimeoutSecs}
}

func (a *Activities) launchSubagent(ctx context.Context, in workflows.ToolCallInput, input json.RawMessage) (json.RawMessage, bool, *workflows.SubagentLaunch, error) {
	var args map[string]any
	_ = json.Unmarshal(input, &args)
	harness, _ := args["harness"].(string)
	model, _ := args["model"].(string)
	prompt, _ := args["prompt"].(string)
	if strings.TrimSpace(harness) == "" || strings.TrimSpace(model) == "" || strings.TrimSpace(prompt) == "" {
		c, e := subagentError(`launch_subagent requires string "harness", "model", and "prompt"`)
		return c, e, nil, nil
	}
	decl, err := a.Store.Client(ctx, in.SessionID, in.ClientKeyID)
	if err != nil {
		return nil, false, nil, err
	}
	var decls []tooldecl.SubagentTool
	_ = json.Unmarshal(decl.SubagentTools, &decls)
	var tool *tooldecl.SubagentTool
	for i := range decls {
		if decls[i].Name == in.Call.Name {
			tool = &decls[i]
		}
	}
	if tool == nil {
		c, e := subagentError(fmt.Sprintf("unknown harness %q", harness))
		return c, e, nil, nil
	}
	defIdx := -1
	for i, d := range tool.Subagents {
		if d.Harness == harness {
			defIdx = i
		}
	}
	if defIdx < 0 {
		c, e := subagentError(fmt.Sprintf("unknown harness %q", harness))
		return c, e, nil, nil
	}
	def := tool.Subagents[defIdx]
	// Declarations are checked at open and join; parsing again here also
	// refuses one stored before a rule was added.
	var command string
	tpl, err := cmdtemplate.ParseSubagent(def.CommandTemplate, def.PromptVia)
	if err == nil {
		command, err = tpl.ExpandSubagent(model, prompt)
	}
	if err != nil {
		c, e := subagentError(fmt.Sprintf("cannot launch harness %q: %v", harness, err))
		return c, e, nil, nil
	}
	limit := a.MaxSubagents
	if limit <= 0 {
		limit = defaultMaxSubagents
	}
	running, err := a.Store.RunningSubagents(ctx, in.SessionID)
	if err != nil {
		return nil, false, nil, err
	}
	if running >= limit {
		c, e := subagentError(fmt.Sprintf("subagent limit reached (max %d per session)", limit))
		return c, e, nil, nil
	}
	sb, err := a.Store.Sandbox(ctx, in.SessionID)
	if err != nil {
		return nil, false, nil, err
	}
	if sb == nil || sb.ID == "" {
		c, e := subagentError(fmt.Sprintf("no remote sandbox is running for tool '%s'; call session.startRemoteSandbox first", in.Call.Name))
		return c, e, nil, nil
	}
	if sb.Image != tool.Image {
		c, e := subagentError(fmt.Sprintf("remote sandbox image mismatch: subagent declared %q but the running sandbox uses %q", tool.Image, sb.Image))
		return c, e, nil, nil
	}
	timeout := int(a.subagentTimeout().Seconds())
	if def.TimeoutSecs != nil && *def.TimeoutSecs > 0 {
		timeout = int(*def.TimeoutSecs)
	}
	sa := store.Subagent{
		ID: subagentID(in.TurnID, in.Call.ID), SessionID: in.SessionID, ClientKeyID: in.ClientKeyID,
		Harness: harness, Model: model, SandboxID: sb.ID, TimeoutSecs: timeout,
		Command: command,
	}
	if def.PromptVia != "arg" {
		sa.Stdin = &prompt
	}
	lifecycle := func(t events.Type) events.Subagent {
		return events.Subagent{Kind: t, Placement: events.PlacementRemote, SubagentID: sa.ID, Harness: harness, Model: model}
	}
	err = a.toolTx(ctx, in, func(tx *store.Tx) error {
		if err := tx.InsertSubagent(ctx, sa); err != nil {
			return err
		}
		_, err := tx.AppendEvents(ctx, in.SessionID,
			a.event(in, "sa_start", lifecycle(events.SubagentStart)),
			a.event(in, "sa_running", lifecycle(events.SubagentRunning)))
		return err
	})
	if err != nil {
		return nil, false, nil, err
	}
	content := subagentContent(map[string]any{"subagent_id": sa.ID, "harness": harness, "model": model, "status": "started"})
	return content, false, &workflows.SubagentLaunch{SubagentID: sa.ID, TimeoutSecs: timeout}, nil
}

func (a *Activities) subagentTimeout() time.Duration {
	if a.SubagentTimeout > 0 {
		return a.SubagentTimeout
	}
	return 10 * time.Minute
}

// subagentStatus reports tracked subagents and returns the terminal ones it
// reported, which are evicted when its result is stored.
func (a *Activities) subagentStatus(ctx context.Context, sessionID string, input json.RawMessage) (json.RawMessage, bool, []string, error) {
	var args map[string]any
	_ = json.Unmarshal(input, &args)
	requested, _ := args["subagent_id"].(string)
	all, err := a.Store.TrackedSubagents(ctx, sessionID)
	if err != nil {
		return nil, false, nil, err
	}
	entries := []map[string]any{}
	var evict []string
	for _, s := range all {
		if requested != "" && s.ID != requested {
			continue
		}
		entries = append(entries, map[string]any{
			"subagent_id": s.ID, "harness": s.Harness, "model": s.Model, "status": s.Status,
			"exit_code": s.ExitCode, "stdout": s.Stdout, "stderr": s.Stderr, "truncated": s.Truncated,
			"reason": s.Reason, "detail": s.Detail,
		})
		if s.Status != store.SubagentRunning {
			evict = append(evict, s.ID)
		}
	}
	if requested != "" && len(entries) == 0 {
		c, e := subagentError("unknown subagent_id")
		return c, e, nil, nil
	}
	return subagentContent(map[string]any{"subagents": entries}), false, evict, nil
}

func capOutput(s string) (string, bool) {
	if len(s) <= subagentOutputCap {
		return s, false
	}
	end := subagentOutputCap
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end], true
}

// RunSubagent runs a launched subagent's command in the session's sandbox
// until it exits, times out or is cancelled, heartbeating meanwhile, and
// records the terminal event. The first terminal transition wins, so an
// explicit cancel or session close recorded elsewhere is never overwritten.
func (a *Activities) RunSubagent(ctx context.Context, in workflows.RunSubagentInput) error {
	sa, err := a.Store.GetSubagent(ctx, in.SessionID, in.SubagentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if sa.Status != store.SubagentRunning {
		return nil
	}
	outcome := telemetry.SubagentCancelled
	span := a.subagentSpan(ctx, in)
	defer func() { endSubagentSpan(span, outcome) }()
	finish := func(o store.SubagentOutcome, typ events.Type) error {
		var exit *int64
		if o.ExitCode != nil {
			c := int64(*o.ExitCode)
			exit = &c
		}
		p := events.Subagent{Kind: typ, Placement: events.PlacementRemote, SubagentID: sa.ID, Harness: sa.Harness, Model: sa.Model,
			Detail: o.Detail, Reason: o.Reason, ExitCode: exit}
		won, err := a.Store.FinishSubagent(context.WithoutCancel(ctx), sa.SessionID, sa.ID, o,
			store.NewEvent{IdemKey: "subagent/" + sa.ID + "/end", ClientKeyID: sa.ClientKeyID, Payload: p})
		if won {
			outcome = telemetry.SubagentFailed
			if o.Status == store.SubagentCompleted {
				outcome = telemetry.SubagentCompleted
			}
		}
		return err
	}
	strp := func(s string) *string { return &s }
	if a.Sandbox == nil {
		return finish(store.SubagentOutcome{Status: store.SubagentFailed, Reason: strp("spawn_failed"), Detail: strp("no sandbox driver is configured on this server")},
			events.SubagentFailed)
	}
	stop := heartbeatEvery(ctx, 5*time.Second)
	var stdin io.Reader // an untyped nil when there is no prompt on stdin
	if sa.Stdin != nil {
		stdin = strings.NewReader(*sa.Stdin)
	}
	// The exec id is the subagent id: a retry (the worker running the first
	// attempt was lost) attaches to the process the first attempt started
	// and collects its outcome, and starts it only if it never started.
	r, xerr := a.Sandbox.ExecOnce(ctx, sa.SandboxID, sandbox.ExecRequest{
		ID: sa.ID, Command: sa.Command, Stdin: stdin, Timeout: time.Duration(sa.TimeoutSecs) * time.Second,
	})
	stop()
	if xerr != nil && ctx.Err() != nil {
		bg := context.WithoutCancel(ctx)
		cur, err := a.Store.GetSubagent(bg, sa.SessionID, sa.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			// Unknown (the server is going down with its pool): the retry
			// decides, and collects the run if it is still wanted.
			return fmt.Errorf("subagent %s: %w (and reading its state: %v)", sa.ID, ctx.Err(), err)
		}
		stillRunning := err == nil && cur.Status == store.SubagentRunning
		if stillRunning && activity.GetInfo(ctx).Attempt < workflows.SubagentRunAttempts {
			// Not cancelled, so the worker is stopping: the process goes on and
			// the retry collects it.
			return fmt.Errorf("subagent %s: %w", sa.ID, ctx.Err())
		}
		// Cancelled by the workflow (explicit cancel or session close; the
		// canceller recorded the terminal event), or no attempt is left to
		// collect the run: stop the process.
		if err := a.Sandbox.CancelExec(bg, sa.SandboxID, sa.ID); err != nil {
			a.logger(ctx, "").Warn("kill subagent", "subagent_id", sa.ID, "error", err)
		}
		if stillRunning {
			return finish(store.SubagentOutcome{Status: store.SubagentFailed, Reason: strp("spawn_failed"), Detail: strp("interrupted: the servers running this subagent stopped")},
				events.SubagentFailed)
		}
		return nil
	}
	if r.Collected {
		a.logger(ctx, "").Info("subagent outcome collected from an earlier attempt", "subagent_id", sa.ID)
	}
	if err := finishRun(r, xerr, finish); err != nil {
		return err
	}
	// Stored: the recorded output is no longer needed (the claim stays).
	if err := a.Sandbox.ReleaseExec(context.WithoutCancel(ctx), sa.SandboxID, sa.ID); err != nil {
		a.logger(ctx, "").Debug("release subagent exec record", "subagent_id", sa.ID, "error", err)
	}
	return nil
}

// finishRun records a subagent run's terminal outcome.
func finishRun(r sandbox.ExecResult, xerr error, finish func(store.SubagentOutcome, events.Type) error) error {
	strp := func(s string) *string { return &s }
	switch {
	case xerr != nil:
		detail := xerr.Error()
		if errors.Is(xerr, sandbox.ErrExecLost) {
			detail = "interrupted: " + detail
		}
		return finish(store.SubagentOutcome{Status: store.SubagentFailed, Reason: strp("spawn_failed"), Detail: strp(detail)},
			events.SubagentFailed)
	case r.TimedOut:
		return finish(store.SubagentOutcome{Status: store.SubagentTimedOut, Reason: strp("timeout")},
			events.SubagentFailed)
	}
	stdout, t1 := capOutput(r.Stdout)
	stderr, t2 := capOutput(r.Stderr)
	code := r.ExitCode
	o := store.SubagentOutcome{ExitCode: &code, Stdout: &stdout, Stderr: &stderr, Truncated: t1 || t2 || r.Truncated}
	if code == 0 {
		o.Status = store.SubagentCompleted
		return finish(o, events.SubagentCompleted)
	}
	o.Status, o.Reason = store.SubagentFailed, strp("nonzero_exit")
	return finish(o, events.SubagentFailed)
}
